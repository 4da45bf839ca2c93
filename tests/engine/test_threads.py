"""The CPU thread governor (engine/core/threads.py): one forward thread per core other processes leave free."""

import os

import pytest
import torch

from engine.core import threads as threads_module
from engine.core.config import EngineConfig
from engine.core.threads import ThreadGovernor
from tools.errors import DossierError


class FakeClock:
    """Stands in for /proc: the machine's busy ticks minus ours, total ticks, and monotonic time."""

    def __init__(self, cpus: int):
        self.cpus, self.now, self.others_busy, self.total = cpus, 100.0, 0, 0

    def advance(self, seconds: float, others_busy_cores: float) -> None:
        ticks = int(seconds * 100)  # 100 ticks a second per CPU
        self.now += seconds
        self.total += ticks * self.cpus
        self.others_busy += int(ticks * others_busy_cores)

    def read(self):
        return self.now, self.others_busy, self.total


@pytest.fixture
def fake(monkeypatch):
    clock = FakeClock(cpus=2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads_module.time, "monotonic", lambda: clock.now)
    monkeypatch.setattr(ThreadGovernor, "_read", lambda self: clock.read())
    return clock


def test_threads_follow_the_cores_others_leave_free(fake):
    governor = ThreadGovernor(cores=2, interval_s=2.0)
    assert governor.threads == 2
    fake.advance(2.5, others_busy_cores=1.0)  # a one-core busy loop
    assert governor.update() == 1 and governor.others == pytest.approx(1.0)
    fake.advance(1.0, others_busy_cores=0.0)  # too soon to re-read: the decision stands
    assert governor.update() == 1
    fake.advance(2.0, others_busy_cores=0.1)  # the other job ended; background noise only
    assert governor.update() == 2
    assert governor.changes == 2


def test_a_second_job_on_both_cores_leaves_one_thread_and_light_noise_keeps_two(fake):
    governor = ThreadGovernor(cores=2)
    fake.advance(3.0, others_busy_cores=2.0)
    assert governor.update() == 1  # never zero
    fake.advance(3.0, others_busy_cores=0.4)
    assert governor.update() == 2


def test_a_fixed_count_never_changes(fake):
    governor = ThreadGovernor(fixed=2, cores=2)
    fake.advance(5.0, others_busy_cores=2.0)
    assert governor.update() == 2 and governor.changes == 0


def test_apply_sets_torch_threads_on_the_calling_thread(fake):
    before = torch.get_num_threads()
    try:
        governor = ThreadGovernor(cores=2)
        fake.advance(3.0, others_busy_cores=1.0)
        governor.apply()
        assert torch.get_num_threads() == 1
    finally:
        import numba

        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # numba first: it resets the OpenMP count
        torch.set_num_threads(before)


def test_the_real_proc_readings_are_consistent():
    governor = ThreadGovernor(interval_s=0.0)
    if governor._last is None:
        pytest.skip("no /proc/stat here (not Linux)")
    sum(i * i for i in range(200_000))  # some CPU time of our own, which must not count as others'
    assert 1 <= governor.update() <= governor.cores
    assert governor.others >= 0.0


def test_the_config_rejects_zero_threads():
    with pytest.raises(DossierError, match="cpu_threads must be >= 1"):
        EngineConfig(cpu_threads=0)


def test_every_benchmark_server_waits_as_the_user_left_it_not_as_this_process_chose(monkeypatch):
    """llama.cpp links libgomp too, and dossier serve decides its own waiting (a short spin when its threads adapt):
    the benchmarks give every server the user's OpenMP waiting, not the OMP_WAIT_POLICY Dossier set for itself."""
    from benchmarks.serve_bench import _env

    monkeypatch.setattr(threads_module, "_USER_WAITING", {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None})
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    env = _env(2)
    assert "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env and env["OMP_NUM_THREADS"] == "2"
    monkeypatch.setattr(threads_module, "_USER_WAITING", {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None})
    assert _env(2)["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_short_spin_only_where_the_thread_count_follows_the_load(monkeypatch):
    """GOMP_SPINCOUNT is set for adaptive threads, before OpenMP loads, and never over the user's own settings."""
    monkeypatch.setattr(threads_module, "_USER_WAITING", {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None})
    monkeypatch.setattr(threads_module, "_openmp_runtimes", lambda: [])
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert not threads_module.spin_briefly_if_adaptive(False) and "GOMP_SPINCOUNT" not in os.environ
    assert threads_module.spin_briefly_if_adaptive(True) and os.environ["GOMP_SPINCOUNT"] == threads_module.SHORT_SPIN
    monkeypatch.delenv("GOMP_SPINCOUNT")
    assert "serve and chat with --threads auto spin" in threads_module.waiting_policy()
    monkeypatch.setattr(threads_module, "_USER_WAITING", {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None})
    assert not threads_module.spin_briefly_if_adaptive(True) and "GOMP_SPINCOUNT" not in os.environ
    assert threads_module.waiting_policy() == "yours, kept by every command: OMP_WAIT_POLICY=PASSIVE"
    monkeypatch.setattr(threads_module, "_USER_WAITING", {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None})
    monkeypatch.setattr(threads_module, "_openmp_runtimes", lambda: ["/lib/libgomp.so.1"])  # loaded: too late
    assert not threads_module.spin_briefly_if_adaptive(True) and "GOMP_SPINCOUNT" not in os.environ


_POOL_SCRIPT = """
import os, threading
import torch
from engine.core.threads import release_openmp_workers
def tasks():
    return len(os.listdir("/proc/self/task"))
torch.set_num_threads(2)
before = tasks()
x = torch.ones(4_000_000)
(x * 2).sum()  # a parallel region: this thread's OpenMP pool gets a worker
with_pool = tasks()
released = release_openmp_workers()
print(before, with_pool, released, tasks())
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="needs Linux's /proc and two cores")
def test_release_lets_the_calling_threads_openmp_workers_go():
    """The thread that loaded a model lets its OpenMP worker exit before another thread takes over the forward."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = subprocess.run([sys.executable, "-c", _POOL_SCRIPT], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr
    before, with_pool, released, after = out.stdout.split()
    assert int(with_pool) > int(before), out.stdout  # the region started a worker thread
    assert released == "True" and int(after) < int(with_pool), out.stdout


def test_the_server_lets_the_loading_threads_workers_go_before_its_engine_thread_steps(monkeypatch):
    """`dossier serve` loads the model on one thread and steps it on another: the loading thread's pool goes first."""
    import threading
    from types import SimpleNamespace

    from engine.serve.backend import LocalBackend

    calls = []
    monkeypatch.setattr(threads_module, "release_openmp_workers",
                        lambda: calls.append((threading.get_ident(), threading.active_count())) or True)
    backend = LocalBackend(SimpleNamespace(processor=None, max_context=64, has_pending=lambda: False))
    running = threading.active_count()
    backend.start()
    backend.stop()
    assert calls == [(threading.get_ident(), running)]  # in the calling thread, before the engine thread started
