"""Run jobs on several bounded worker processes: a job that hangs, runs out of memory or crashes fails alone.

Used by ingest (a document's text layer) and the OCR step (a page's render and read). Each job
runs in a `BoundedWorker` (tools/corpus/worker.py): a malformed or hostile PDF that segfaults
MuPDF, loops for hours or grows without bound costs that one job, which gets the result
`failed(job, status, detail)` makes of it, and its worker is replaced for the next job.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait

from tools.corpus.worker import BoundedWorker, WorkLimits

__all__ = ["run_isolated"]

log = logging.getLogger(__name__)

# failed(job, status, detail) -> the job's result; status is "timeout", "memory", "crash" or "error"
# (tools/corpus/worker.py `Outcome`), detail a short text (how the process died, the exception).
Failed = Callable[[object, str, object], object]


def run_isolated(jobs: Sequence, work: Callable, args: tuple, workers: int, finished: Callable, failed: Failed,
                 limits: WorkLimits, initializer: Callable | None = None, initargs: tuple = ()) -> None:
    """Call `finished(job, work(job, *args))` for every job, computed in bounded worker processes.

    Args:
        jobs: picklable job descriptions.
        work: module-level function run in the workers as work(job, *args).
        args: extra picklable arguments for `work`.
        workers: worker processes (at most one per job).
        finished: called in this process with (job, result), in completion order.
        failed: makes the result of a job that exceeded `limits` or killed its worker.
        limits: the deadline of each job and the memory cap of each worker.
        initializer, initargs: run once per worker process (e.g. to load an OCR engine).
    """
    pending = deque(jobs)
    pool = [BoundedWorker(limits.memory_mb, initializer, initargs) for _ in range(min(workers, len(pending)))]
    busy: dict[BoundedWorker, object] = {}
    try:
        while pending or busy:
            for worker in pool:
                if worker not in busy and pending:
                    busy[worker] = job = pending.popleft()
                    worker.submit(work, (job, *args), limits.timeout_s)
            timeout = max(min(worker.due() for worker in busy) - time.monotonic(), 0.0)
            ready = wait([worker.conn for worker in busy], timeout=timeout)
            for worker in list(busy):
                if worker.conn in ready:
                    outcome = worker.receive()
                    if outcome is None:
                        continue  # initialised: the job's deadline starts now
                    job = busy.pop(worker)
                    status, value = outcome
                    if status != "ok":
                        log.info("job %s: %s (%s)", job, status, value)
                        value = failed(job, status, value)
                    finished(job, value)
                elif worker.overdue(time.monotonic()):
                    worker.kill()
                    job = busy.pop(worker)
                    log.info("job %s: past its %g s deadline; its worker was killed", job, limits.timeout_s)
                    finished(job, failed(job, "timeout", limits.timeout_s))
    finally:
        for worker in pool:
            worker.close()
