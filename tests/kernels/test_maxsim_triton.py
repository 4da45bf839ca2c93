"""The fused Triton MaxSim kernel: under the CPU interpreter (subprocess) and, with CUDA, on the GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

CHECK = Path(__file__).with_name("_maxsim_triton_check.py")


def test_triton_kernel_equals_reference_under_interpreter():
    """TRITON_INTERPRET must be set before triton is imported, hence a fresh interpreter process."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(CHECK)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["float32"]["max_rel"] <= 1e-5, report
    for dtype in ("float16", "bfloat16", "int8"):  # the query is rounded to fp16 for the fp16 dot
        assert report[dtype]["max_rel"] <= 1e-3, (dtype, report[dtype])
        assert report[dtype]["empty_page_score"] == 0.0
    assert report["batch"]["max_rel"] <= 1e-5, report


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_triton_kernel_on_gpu_matches_einsum():
    from kernels.maxsim import einsum_maxsim_padded, maxsim

    gen = torch.Generator().manual_seed(0)
    pages = torch.nn.functional.normalize(torch.randn(200, 768, 128, generator=gen), dim=-1)
    query = torch.nn.functional.normalize(torch.randn(32, 128, generator=gen), dim=-1)
    ref = einsum_maxsim_padded(query[None], pages.half().float())[0]
    offsets = (torch.arange(201, dtype=torch.int64) * 768).cuda()
    got = maxsim(query.cuda(), pages.view(-1, 128).half().cuda(), offsets).cpu()
    rel = (got - ref).abs() / ref.abs()
    assert rel.max() <= 1e-3, f"rel diff max {rel.max():.3g} mean {rel.mean():.3g}"
