"""The bounded worker process (tools/corpus/worker.py): deadline, memory cap, crash and a failing start."""

import os
import time

import pytest

from tools.corpus.worker import BoundedWorker, WorkerPool, WorkLimits
from tools.errors import DossierError


def pid() -> int:
    return os.getpid()


def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def fail() -> None:
    raise ValueError("bad page")


def die() -> None:
    os._exit(139)  # what a segfault in a C library does to the process


def allocate(megabytes: int) -> int:
    return len(bytearray(megabytes << 20))


def broken_init() -> None:
    raise RuntimeError("model file missing")


def test_a_job_past_its_deadline_is_killed_and_the_next_job_gets_a_fresh_process():
    worker = BoundedWorker(memory_mb=0)
    try:
        first = worker.call(pid, (), 30)
        start = time.monotonic()
        assert worker.call(sleep, (60,), 1.0) == ("timeout", 1.0)
        assert time.monotonic() - start < 10
        status, second = worker.call(pid, (), 30)
        assert first[0] == "ok" and status == "ok" and second != first[1]
    finally:
        worker.close()


def test_errors_keep_the_process_and_crashes_say_how_it_died():
    worker = BoundedWorker(memory_mb=0)
    try:
        before = worker.call(pid, (), 30)
        assert worker.call(fail, (), 30) == ("error", "ValueError: bad page")
        assert worker.call(pid, (), 30) == before  # an exception is the job's, not the process's
        assert worker.call(die, (), 30) == ("crash", "exit code 139")
        assert worker.call(sleep, (0,), 30) == ("ok", "woke")
    finally:
        worker.close()


def test_the_memory_cap_fails_the_allocation_not_the_machine():
    pool = WorkerPool(memory_mb=512, keep=1)
    try:
        assert pool.call(allocate, (64,), 30) == ("ok", 64 << 20)
        status, detail = pool.call(allocate, (2048,), 30)
        assert status == "memory", (status, detail)
        assert pool.call(allocate, (64,), 30) == ("ok", 64 << 20)
    finally:
        pool.close()


def test_a_failing_initializer_fails_the_job_with_its_reason():
    worker = BoundedWorker(memory_mb=0, initializer=broken_init)
    try:
        assert worker.call(pid, (), 30) == ("error", "RuntimeError: model file missing")
    finally:
        worker.close()


@pytest.mark.parametrize("timeout_s, memory_mb", [(0, 4096), (-1, 4096), (10, 100)])
def test_unusable_limits_are_refused(timeout_s, memory_mb):
    with pytest.raises(DossierError, match=str(memory_mb) if timeout_s > 0 else "positive"):
        WorkLimits(timeout_s, memory_mb)
