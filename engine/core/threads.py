"""CPU threads of the forward pass: how many, and how they wait, decided from what else runs.

On a small CPU shared with other work two things made an agent run many times slower
than alone (benchmarks/bench_load.py measures both):

1. Spinning. torch's OpenMP pool, MKL, and numba's parallel kernels (a second OpenMP
   runtime in the same process) spin-wait after every parallel region, taking a core
   from whatever runs next, including each other. `prefer_passive_waiting()` sets
   OMP_WAIT_POLICY=PASSIVE (threads sleep at once); it must run before torch loads
   OpenMP, so the CLI calls it first thing, and `import engine.core` calls it too.
   A value the user set is kept.
2. A parallel region is as slow as its slowest thread. With two threads and another
   process busy on one of the two cores, every region of every layer waits for the
   thread that shares that core to get a timeslice. One thread per core that is
   actually free is faster.

`ThreadGovernor` decides the second: every `interval_s` seconds it reads the CPU time the
whole machine spent busy (/proc/stat) minus this process's own (/proc/self/stat), i.e.
the cores other processes keep busy, and gives the forward `round(cores - others)`
threads (at least 1, at most the cores this process may run on). Two Dossier jobs on two
cores each settle on one thread, one core each. Without /proc (not Linux) it keeps the
core count. A fixed count (`EngineConfig.cpu_threads`) turns it off.

Passive waiting has its own cost: every parallel region wakes its partner thread with a futex, about
40 us, and a prefill step of a small model runs about a thousand regions (element-wise ops on a few
dozen rows). Where the thread count follows the load (the governor is on), a thread that spins
briefly cannot spin against other work for long: the governor drops to one thread, which has no
partner to wait for. So `dossier serve`, whose threads adapt by default, calls
`spin_briefly_if_adaptive(True)` before torch loads: idle threads spin about 0.1 ms
(GOMP_SPINCOUNT=10000), then sleep. A fixed count (`--threads N`, the deterministic mode) keeps
passive waiting: beside a busy process a spinning fixed team was 4x slower (docs/benchmarks.md).

libgomp spins only while the process's OpenMP workers are no more than its cores; beyond that it
spins ~100 times and sleeps. It keeps one pool of workers per thread that ever ran a parallel region,
so an engine loaded on the main thread and stepped on another has two pools, and short spinning
silently does nothing there. `release_openmp_workers()` lets the calling thread's pool go; the server
calls it in the loading thread before its engine thread starts. (Not covered: a server thread that later runs a
parallel region itself, e.g. an image processor's torch ops, starts a pool of its own, and spinning is throttled
again while that thread lives.)
"""

from __future__ import annotations

import logging
import os
import time

__all__ = ["SHORT_SPIN", "ThreadGovernor", "available_cores", "omp_thread_limit", "peer_environment",
           "prefer_passive_waiting", "release_openmp_workers", "set_torch_threads", "spin_briefly_if_adaptive",
           "waiting_policy"]

log = logging.getLogger(__name__)

# OpenMP waiting as the user left it, read before Dossier sets anything (this module is imported first thing).
_OMP_WAITING = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_USER_WAITING = {name: os.environ.get(name) for name in _OMP_WAITING}


def prefer_passive_waiting() -> None:
    """Make OpenMP threads sleep instead of spinning when idle (before torch loads; keeps a user's value).

    Under OMP_THREAD_LIMIT it also makes torch's default thread count the limit (OMP_NUM_THREADS, unless
    set): torch does not read the limit, and more torch threads than it allows corrupt bf16 matmuls.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    limit = omp_thread_limit()
    if limit is not None:
        os.environ.setdefault("OMP_NUM_THREADS", str(limit))


SHORT_SPIN = "10000"  # libgomp's spin iterations before an idle thread sleeps: about 0.1 ms


def _openmp_runtimes() -> list[str]:
    """Paths of the OpenMP runtimes loaded in this process (libgomp, Intel's libiomp5, LLVM's libomp), from
    /proc/self/maps; empty where none is loaded yet or the maps cannot be read."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if ".so" in line}
    except OSError:
        return []
    return sorted(path for path in paths if os.path.basename(path).startswith(("libgomp", "libiomp5", "libomp.")))


def spin_briefly_if_adaptive(adaptive: bool) -> bool:
    """Before torch loads: let idle OpenMP threads spin about 0.1 ms before sleeping when `adaptive` (the thread
    count follows the load). Keeps a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT, and changes nothing once an OpenMP
    runtime is loaded (it read its settings then). Returns True when it set the short spin."""
    if not adaptive or any(_USER_WAITING[name] is not None for name in _OMP_WAITING):
        return False
    if _openmp_runtimes():
        log.debug("OpenMP is loaded already: idle threads keep the waiting it read at load")
        return False
    os.environ["GOMP_SPINCOUNT"] = SHORT_SPIN
    return True


def waiting_policy() -> str:
    """Which commands' idle OpenMP threads spin and which sleep, in words (`dossier version`)."""
    users = {name: value for name, value in _USER_WAITING.items() if value is not None}
    if users:
        return "yours, kept by every command: " + ", ".join(f"{name}={value}" for name, value in users.items())
    return (f"serve and chat with --threads auto spin ~0.1 ms (GOMP_SPINCOUNT={SHORT_SPIN}), then sleep; a fixed "
            "--threads or the deterministic mode (run's default) sleeps at once (OMP_WAIT_POLICY=PASSIVE)")


def release_openmp_workers() -> bool:
    """Let the worker threads of the calling thread's OpenMP pool exit (`omp_pause_resource_all`, soft).

    Call it in a thread that ran parallel regions (loading a model) and hands the forward to another thread: while
    both pools exist libgomp counts more workers than cores and stops spinning (module docstring). The next region
    in the calling thread starts a new pool. Returns True when a runtime released its pool.
    """
    import ctypes

    released = False
    for path in _openmp_runtimes():
        try:
            pause = ctypes.CDLL(path).omp_pause_resource_all
        except (OSError, AttributeError):  # an OpenMP before 5.0 has no pause
            continue
        pause.restype, pause.argtypes = ctypes.c_int, [ctypes.c_int]
        released = pause(1) == 0 or released  # 1: omp_pause_soft
    return released


def peer_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` for a server a benchmark starts (llama.cpp's, or `dossier serve`): OpenMP waiting as the user had it.

    Dossier sets OMP_WAIT_POLICY in its own environment; a peer that links libgomp too would inherit it and wait
    the way Dossier chose, not its own default, and `dossier serve` would take it for the user's and keep it.
    """
    env = dict(env)
    for name in _OMP_WAITING:
        if _USER_WAITING[name] is None:
            env.pop(name, None)
        else:
            env[name] = _USER_WAITING[name]
    return env


def omp_thread_limit() -> int | None:
    """OMP_THREAD_LIMIT as a positive number, or None when it is unset or not one."""
    try:
        limit = int(os.environ.get("OMP_THREAD_LIMIT", ""))
    except ValueError:
        return None
    return limit if limit > 0 else None


_warned_limit: list[int] = []


def set_torch_threads(threads: int) -> int:
    """Give torch `threads` intra-op threads, never more than OMP_THREAD_LIMIT; returns the count set.

    The OpenMP runtime honours OMP_THREAD_LIMIT (set for tesseract, say) but torch does not know it:
    with the limit at 1 and torch told 2, oneDNN splits a bf16 matmul for two threads, one runs, and
    half of the output is never written (garbage logits, measured on an avx512_bf16 CPU). So every
    thread count goes through here.
    """
    import torch

    limit = omp_thread_limit()
    if limit is not None and threads > limit:
        if limit not in _warned_limit:
            _warned_limit.append(limit)
            log.warning("OMP_THREAD_LIMIT=%d: using %d CPU thread(s), not %d (unset it to use more)",
                        limit, limit, threads)
        threads = limit
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def available_cores() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _machine_busy_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat; None where unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def _own_ticks() -> int | None:
    """User + system clock ticks of this process (all its threads), from /proc/self/stat."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat(5))


class ThreadGovernor:
    """Chooses the forward's thread count from the load other processes put on the machine.

    Args:
        fixed: a fixed thread count, or None to adapt.
        interval_s: seconds between load readings (and possible changes).
        cores: cores this process may use (default: its affinity mask).
    """

    def __init__(self, fixed: int | None = None, interval_s: float = 2.0, cores: int | None = None) -> None:
        self.cores = cores or available_cores()
        self.fixed = fixed
        self.interval_s = interval_s
        self.threads = fixed or self.cores
        self.others = 0.0  # cores kept busy by other processes at the last reading
        self.changes = 0  # how often the count changed
        self._last = self._read()
        self._applied_to: tuple[int, int] | None = None  # (thread ident, count) last applied

    def _read(self) -> tuple[float, int, int] | None:
        machine, own = _machine_busy_ticks(), _own_ticks()
        if machine is None or own is None:
            return None
        return time.monotonic(), machine[0] - own, machine[1]

    def threads_for(self, others: float) -> int:
        """Threads to use when other processes keep `others` cores busy."""
        return max(1, min(self.cores, round(self.cores - others)))

    def update(self) -> int:
        """Re-read the load when `interval_s` has passed; returns the thread count to use now."""
        if self.fixed is not None or self._last is None or self.cores == 1:
            return self.threads
        if time.monotonic() - self._last[0] < self.interval_s:
            return self.threads
        now = self._read()
        if now is None:
            return self.threads
        busy_others, total = now[1] - self._last[1], now[2] - self._last[2]
        self._last = now
        if total <= 0:
            return self.threads
        # total ticks cover every CPU of the machine; scale to cores of this process's share
        machine_cpus = os.cpu_count() or self.cores
        self.others = max(0.0, busy_others / total * machine_cpus)
        threads = self.threads_for(self.others)
        if threads != self.threads:
            log.info("other processes keep %.1f of %d cores busy: %d -> %d forward threads",
                     self.others, self.cores, self.threads, threads)
            self.threads = threads
            self.changes += 1
        return self.threads

    def apply(self) -> None:
        """Set torch's and numba's thread counts on the calling thread when they differ from the decision."""
        threads = self.update()
        threads = min(threads, omp_thread_limit() or threads)  # numba's OpenMP pool obeys the limit too
        key = (_thread_ident(), threads)
        if key == self._applied_to:
            return
        try:  # numba first: its first call starts its OpenMP pool, which resets the OpenMP thread count
            import numba

            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        except ImportError:  # numba is optional for the forward (attention falls back to sdpa)
            pass
        set_torch_threads(threads)
        self._applied_to = key


def _thread_ident() -> int:
    import threading

    return threading.get_ident()
