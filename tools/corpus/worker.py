"""A worker process with a deadline per job and a memory cap: where untrusted PDFs are read and drawn.

A PDF can be built to make MuPDF work forever inside one C call (Form XObjects that each draw
the one below twice: 2^depth text runs from 8 KB), which no signal or thread in the same process
can stop. So every page's text, render and OCR runs in a `BoundedWorker`: a child process with
an address-space limit (RLIMIT_AS: an allocation beyond it fails, MuPDF reports it, the job
fails instead of the machine swapping), and a wall-clock deadline per job after which the
parent kills the process and starts a fresh one for the next job. A CPU-time limit (RLIMIT_CPU)
per job is the backstop when the parent itself is killed: an orphaned worker stops on its own.

The child is a fresh interpreter started with subprocess (not multiprocessing's spawn, which
re-imports the caller's `__main__`: ~0.15 s of CLI imports per worker, and a RuntimeError in a
script without an `if __name__ == "__main__"` guard); they talk over a socket pair through
multiprocessing's `Connection`, so jobs and results travel pickled.

    worker = BoundedWorker(memory_mb=4096)
    status, value = worker.call(read_pdf, ("report.pdf",), timeout_s=120)   # "ok", "timeout", "crash", ...
    worker.close()

`WorkerPool` lends idle workers to threads (the studio renders pages from several request
threads); `tools/corpus/pool.py` runs many jobs on several workers at once.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

from tools.errors import DossierError

__all__ = ["DEFAULT_MEMORY_MB", "BoundedWorker", "WorkLimits", "WorkerPool", "memory_exhausted"]

DEFAULT_MEMORY_MB = 4096  # the biggest FinanceBench 10-K peaks at ~320 MB of address space, RapidOCR at ~1.7 GB
INIT_TIMEOUT_S = 600.0  # seconds a new worker may take to start: imports, and an initializer such as an OCR model
# Words MuPDF (fz_malloc/fz_calloc), Python and numpy use when an allocation fails under RLIMIT_AS.
_NO_MEMORY = ("malloc (", "calloc (", "realloc (", "out of memory", "cannot allocate memory", "unable to allocate")

# Status of a finished job: "ok" (value is the result), "error" (an exception escaped the job: value
# is "Type: message"), "memory" (it ran out of the address space it may use), "timeout" (killed at
# its deadline), "crash" (the process died: value says how).
Outcome = tuple[str, object]


@dataclass(slots=True, frozen=True)
class WorkLimits:
    """The bounds of one kind of job."""

    timeout_s: float = 120.0  # wall-clock seconds one job may take; then its worker is killed and it fails
    memory_mb: int = DEFAULT_MEMORY_MB  # address space (RLIMIT_AS) of each worker process, MiB; 0 = no cap

    def __post_init__(self):
        if not self.timeout_s > 0:
            raise DossierError(f"the time limit must be positive seconds, got {self.timeout_s}")
        if self.memory_mb != 0 and self.memory_mb < 256:
            raise DossierError(f"the memory limit {self.memory_mb} MB is too small for a PDF reader "
                               "(use at least 256, e.g. 4096; 0 = no limit)")


def memory_exhausted(err: BaseException) -> bool:
    """Whether an exception means an allocation failed (what hitting RLIMIT_AS looks like)."""
    if isinstance(err, MemoryError):
        return True
    text = str(err).lower()
    return any(word in text for word in _NO_MEMORY)


class BoundedWorker:
    """One child process that runs jobs one at a time, each under a deadline; restarted when killed.

    Not thread-safe: one thread uses a worker at a time (`WorkerPool` lends them).

    Args:
        memory_mb: address-space cap of the process in MiB (0: none).
        initializer, initargs: run once in each new process before its first job (e.g. load an OCR
            model); its time does not count against a job's deadline.
    """

    def __init__(self, memory_mb: int = DEFAULT_MEMORY_MB, initializer: Callable | None = None, initargs: tuple = ()):
        self.memory_mb = memory_mb
        self.initializer, self.initargs = initializer, initargs
        self.process = None
        self.conn = None
        self.deadline = math.inf  # monotonic time the running job must end by (inf while idle or initialising)
        self._timeout_s = 0.0  # the running job's limit, started when the initializer reports ready
        self._initialising = False  # the process starts: the job's deadline starts when it reports ready
        self._started = 0.0  # monotonic time the process was started

    # -- one job at a time, asynchronously (the pool waits on many workers' `conn`) ---------------
    def prepare(self, fn: Callable) -> None:
        """Start the process now and import `fn`'s module there, while the caller does other work."""
        if self.process is None or self.process.poll() is not None:
            self._start(fn)

    def submit(self, fn: Callable, args: tuple, timeout_s: float) -> None:
        """Start `fn(*args)` in the process (starting the process first when there is none)."""
        if self.process is None or self.process.poll() is not None:
            self._start(fn)
        self.conn.send(("job", fn, args, timeout_s))
        self._timeout_s = timeout_s
        self.deadline = math.inf if self._initialising else time.monotonic() + timeout_s

    def receive(self) -> Outcome | None:
        """Read what the process sent once `conn` is readable: the job's outcome, or None (initialised)."""
        try:
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            return "crash", self._reap()
        if kind == "ready":
            self._initialising = False
            self.deadline = time.monotonic() + self._timeout_s
            return None
        if self._initialising:  # the start failed (an import, the initializer): the process ends without the job
            self.kill()
        self.deadline = math.inf
        return kind, value

    def due(self) -> float:
        """Monotonic time by which the process must answer: the job's deadline, or the end of its start-up."""
        return self._started + INIT_TIMEOUT_S if self._initialising else self.deadline

    def overdue(self, now: float) -> bool:
        return now >= self.due()

    def kill(self) -> None:
        """Stop the process now (it is stuck in a job); the next `submit` starts a fresh one."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(5)
            self.conn.close()
        self.process, self.conn, self.deadline, self._initialising = None, None, math.inf, False

    def close(self) -> None:
        """Let an idle process exit (it reads end-of-file), or kill a busy one."""
        if self.process is None:
            return
        if self.deadline == math.inf and not self._initialising:
            self.conn.close()
            try:
                self.process.wait(2)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    # -- one job, blocking ----------------------------------------------------------------------
    def call(self, fn: Callable, args: tuple, timeout_s: float) -> Outcome:
        """Run `fn(*args)` in the process and wait for it, at most `timeout_s` seconds after it starts."""
        self.submit(fn, args, timeout_s)
        while True:
            if wait([self.conn], timeout=max(self.due() - time.monotonic(), 0.0)):
                outcome = self.receive()
                if outcome is not None:
                    return outcome
            elif self.overdue(time.monotonic()):
                self.kill()
                return "timeout", timeout_s

    def _start(self, fn: Callable) -> None:
        # a fresh interpreter, never a fork: fork would copy a server's threads and locks
        ours, theirs = socket.socketpair()
        memory_bytes = self.memory_mb << 20 if self.memory_mb else 0
        root = str(Path(__file__).resolve().parents[2])  # this checkout's `tools`, then the caller's path
        paths = [root] + [path for path in sys.path if path and path != root]
        code = (f"import sys; sys.path[:0] = {paths!r}; from tools.corpus.worker import _serve; "
                f"_serve({theirs.fileno()}, {memory_bytes})")
        try:
            # stdout goes to stderr: a worker's stray print must not corrupt `--format json` output
            self.process = subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(),),
                                            stdin=subprocess.DEVNULL, stdout=2)
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self._started = time.monotonic()
        self._initialising = True
        # `fn` travels by reference: unpickling it imports its module (pymupdf, numpy) before "ready", so
        # a job's deadline counts the job, not the interpreter's start-up on a busy machine
        self.conn.send(("init", self.initializer, (fn, *self.initargs), INIT_TIMEOUT_S))

    def _reap(self) -> str:
        code = self.process.wait(5)
        self.conn.close()
        self.process, self.conn, self.deadline, self._initialising = None, None, math.inf, False
        if code is not None and code < 0:
            import signal

            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"


class WorkerPool:
    """Idle `BoundedWorker`s lent to one thread at a time, so repeated jobs skip the process start-up.

    Args:
        memory_mb: address-space cap of each worker, MiB (0: none).
        keep: idle workers kept for later jobs; more are started while all are busy.
    """

    def __init__(self, memory_mb: int = DEFAULT_MEMORY_MB, keep: int = 2):
        self.memory_mb, self.keep = memory_mb, keep
        self._idle: list[BoundedWorker] = []
        self._lock = threading.Lock()

    def call(self, fn: Callable, args: tuple, timeout_s: float) -> Outcome:
        """Run `fn(*args)` in an idle (or new) worker, under the deadline; see `BoundedWorker.call`."""
        with self._lock:
            worker = self._idle.pop() if self._idle else BoundedWorker(self.memory_mb)
        try:
            outcome = worker.call(fn, args, timeout_s)
        except BaseException:
            worker.kill()
            raise
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(worker)
                worker = None
        if worker is not None:
            worker.close()
        return outcome

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


# -- the worker process ----------------------------------------------------------------------------
def _serve(fd: int, memory_bytes: int) -> None:
    """The process's loop: set the limits, then run each job it is sent on `fd` and send back its outcome."""
    import resource
    import signal

    conn = Connection(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops its workers

    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")  # one job at a time; BLAS threads would each reserve address space
    if memory_bytes:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    while True:
        try:
            message = conn.recv()  # unpickling imports the job's module: under the cap
        except (EOFError, OSError):
            return  # the parent is gone or done with this worker
        except BaseException as err:  # noqa: BLE001 -- a job that cannot be unpickled fails alone
            conn.send(("memory" if memory_exhausted(err) else "error", f"{type(err).__name__}: {str(err)[:200]}"))
            continue
        kind, fn, args, timeout_s = message
        _cpu_backstop(timeout_s)
        try:
            if kind == "init":  # args[0] is the job function, imported by now
                value = fn(*args[1:]) if fn is not None else None
            else:
                value = fn(*args)
            reply = ("ready", None) if kind == "init" else ("ok", value)
        except BaseException as err:  # noqa: BLE001 -- reported to the parent, which decides
            reply = ("memory" if memory_exhausted(err) else "error", f"{type(err).__name__}: {str(err)[:200]}")
            value = None
        started = reply[0] == "ready" or kind != "init"
        try:
            conn.send(reply)
        except MemoryError:  # the result itself did not fit under the cap
            value = reply = None
            conn.send(("memory", "MemoryError: the result does not fit in the memory limit"))
        except (EOFError, OSError):
            return
        if not started:
            return  # a worker that cannot start is useless: the parent sees the error, then end-of-file
        del value, reply


def _cpu_backstop(timeout_s: float) -> None:
    """Let this process use at most about twice the job's deadline of CPU time from now (SIGXCPU ends it).

    The parent kills a job at its wall-clock deadline; this only matters when the parent died
    first and nobody is left to kill a worker stuck in a hostile PDF.
    """
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime + 2 * timeout_s + 10)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
