"""Run jobs in spawned worker processes, isolating any job that crashes its worker.

Used by ingest (PDF extraction) and the OCR step: a malformed PDF or page can kill a
worker outright (a segfault in a C library), which breaks the whole pool. The jobs that
had not finished are then retried one at a time, each in a fresh single-worker pool, so
only the culprit fails, with `crash_result` as its result.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

__all__ = ["run_isolated"]

log = logging.getLogger(__name__)


def run_isolated(jobs: Sequence, work: Callable, args: tuple, workers: int, finished: Callable,
                 crash_result: object, initializer: Callable | None = None, initargs: tuple = ()) -> None:
    """Call `finished(job, work(job, *args))` for every job, computed in worker processes.

    Args:
        jobs: picklable job descriptions.
        work: module-level function run in the workers as work(job, *args).
        args: extra picklable arguments for `work`.
        workers: worker processes.
        finished: called in this process with (job, result), in completion order.
        crash_result: the result given to a job that crashes its worker even when run alone.
        initializer, initargs: run once per worker process (e.g. to load an OCR engine).
    """
    context = multiprocessing.get_context("spawn")
    pending = list(jobs)
    with ProcessPoolExecutor(workers, mp_context=context, initializer=initializer, initargs=initargs) as pool:
        futures: dict[Future, object] = {pool.submit(work, job, *args): job for job in pending}
        try:
            for future in as_completed(futures):
                job = futures[future]
                finished(job, future.result())
                pending.remove(job)
        except BrokenProcessPool:
            log.warning("a job crashed its worker process; retrying the remaining %d one by one", len(pending))
    for job in pending:
        with ProcessPoolExecutor(1, mp_context=context, initializer=initializer, initargs=initargs) as solo:
            try:
                result = solo.submit(work, job, *args).result()
            except BrokenProcessPool:
                result = crash_result
        finished(job, result)
