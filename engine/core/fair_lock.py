"""The engine's step lock, handed to waiting threads in the order they came.

The engine thread takes the lock for a whole forward step (tens to hundreds of milliseconds on a
CPU), releases it and takes it again for the next step at once. With `threading.RLock` a thread
that wanted it meanwhile (a server thread opening a session for a new request) is woken but
usually loses the race to the stepping thread, and waits another step, and another: under load
a request measured 470 ms (two to three steps) in `submit` before its first step
(benchmarks/hostile_serve.py). This lock hands itself over on release: whoever waited longest owns
it next, so a thread that wants the lock waits for at most the steps of the threads ahead of it.

Re-entrant like RLock: the owner may take it again (the engine's methods call each other).
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["FairRLock"]


class FairRLock:
    """A re-entrant lock granted first come, first served."""

    __slots__ = ("_mu", "_owner", "_depth", "_waiters")

    def __init__(self) -> None:
        self._mu = threading.Lock()  # guards the fields below; held only for a few instructions
        self._owner: int | None = None
        self._depth = 0
        self._waiters: deque[tuple[int, threading.Lock]] = deque()  # (thread ident, its gate), oldest first

    def acquire(self) -> bool:
        me = threading.get_ident()
        with self._mu:
            if self._owner == me:
                self._depth += 1
                return True
            if self._owner is None and not self._waiters:
                self._owner, self._depth = me, 1
                return True
            gate = threading.Lock()
            gate.acquire()
            self._waiters.append((me, gate))
        try:
            gate.acquire()  # opened by the release that made this thread the owner
        except BaseException:  # interrupted (Ctrl-C in the main thread): leave the queue, or pass the lock on
            with self._mu:
                handed = self._owner == me
                if not handed:
                    self._waiters.remove((me, gate))
            if handed:
                self.release()
            raise
        return True

    def release(self) -> None:
        with self._mu:
            if self._owner != threading.get_ident():
                raise RuntimeError("cannot release a FairRLock this thread does not hold")
            self._depth -= 1
            if self._depth:
                return
            if self._waiters:
                self._owner, gate = self._waiters.popleft()
                self._depth = 1
                gate.release()
            else:
                self._owner = None

    def locked(self) -> bool:
        return self._owner is not None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
