"""OMP_THREAD_LIMIT below torch's thread count makes bf16 matmuls write half their output: every thread
count Dossier sets goes through engine/core/threads.set_torch_threads, which stays within the limit."""

import os
import subprocess
import sys

import pytest

SCRIPT = """
import torch
from engine.core.threads import set_torch_threads
torch.manual_seed(0)
got = set_torch_threads(2)
layer = torch.nn.Linear(64, 256).to(torch.bfloat16)
x = torch.randn(17, 64, dtype=torch.bfloat16)
error = (layer(x).float() - torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float())).abs().max()
print(got, torch.get_num_threads(), float(error))
"""


@pytest.mark.parametrize("limit, threads", [("1", 1), ("", 2)])
def test_thread_count_stays_within_omp_thread_limit_and_bf16_matmuls_are_right(limit, threads):
    env = {**os.environ, "OMP_THREAD_LIMIT": limit} if limit else {
        k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got, torch_threads, error = done.stdout.split()
    assert int(got) == threads and int(torch_threads) == threads
    assert float(error) < 0.05  # bf16 rounding of a 64-term sum; a half-written output is off by ~1


def test_the_limit_is_read_as_a_positive_number(monkeypatch):
    from engine.core.threads import omp_thread_limit

    for value, expected in (("3", 3), ("0", None), ("many", None)):
        monkeypatch.setenv("OMP_THREAD_LIMIT", value)
        assert omp_thread_limit() == expected
    monkeypatch.delenv("OMP_THREAD_LIMIT")
    assert omp_thread_limit() is None
