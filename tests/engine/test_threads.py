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


def test_a_peer_server_waits_as_the_user_left_it_not_as_dossier_chose(monkeypatch):
    """llama.cpp links libgomp too: the benchmarks give it the user's OpenMP waiting, not Dossier's."""
    from benchmarks.serve_bench import _env

    monkeypatch.setattr(threads_module, "_USER_WAITING", {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None})
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    ours, peer = _env(2), _env(2, peer=True)
    assert ours["OMP_WAIT_POLICY"] == "PASSIVE" and ours["GOMP_SPINCOUNT"] == "10000"
    assert "OMP_WAIT_POLICY" not in peer and "GOMP_SPINCOUNT" not in peer and peer["OMP_NUM_THREADS"] == "2"
    monkeypatch.setattr(threads_module, "_USER_WAITING", {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None})
    assert _env(2, peer=True)["OMP_WAIT_POLICY"] == "ACTIVE"
