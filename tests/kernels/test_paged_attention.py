"""Triton paged attention against the PyTorch reference: interpreted on the CPU, compiled for an H200, and on CUDA.

TRITON_INTERPRET must be set before triton is imported, so the interpreted cases run in a fresh
process (`_paged_attention_check.py`, which lists every case with its shape).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("_paged_attention_check.py")
# Max |kernel - fp32 reference| on O(1) values: fp32 differs by summation order only; fp16/bf16 by
# the output rounding and the probabilities rounded to the value dtype before P @ V (as flash-attn does).
TOLERANCE = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 2e-2}


def test_triton_paged_attention_matches_reference_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(CHECK)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    from tests.kernels._paged_attention_cases import CASE_NAMES

    assert [r["case"] for r in reports] == CASE_NAMES
    for report in reports:
        limit = TOLERANCE[report["dtype"]]
        assert report["max_abs"] <= limit, (
            f"{report['case']}: max diff {report['max_abs']:.3g} (mean {report['mean_abs']:.3g}) above {limit}"
        )
    kernels = {r["kernel"] for r in reports}
    assert kernels == {"prefill", "decode"}


@pytest.mark.slow
def test_kernels_compile_for_an_h200():
    """The compiled path (not the interpreter) builds for sm_90 with production tile sizes: ptxas ships with triton."""
    from kernels.paged_attention_triton import compile_for_target

    for dtype in (torch.bfloat16, torch.float16):
        for name, info in compile_for_target(dtype, capability=90).items():
            assert info["shared_bytes"] <= 227 * 1024, (name, info)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_triton_paged_attention_on_gpu(dtype):
    from kernels.paged_attention import paged_attention_reference
    from kernels.paged_attention_triton import decode_split_len, paged_decode, paged_prefill
    from tests.kernels._paged_attention_cases import build

    lengths = [(512, 512), (300, 1800), (1, 4000), (64, 64)]
    q, k_cache, v_cache, cu, context, tables = (t.cuda() for t in build(dtype, 32, 8, 128, 16, lengths))
    want = paged_attention_reference(q.float(), k_cache.float(), v_cache.float(), cu, context, tables)
    got = paged_prefill(q, k_cache, v_cache, cu, context, tables, 512, block_m=64, block_n=64)
    diff = (got.float() - want).abs()
    assert diff.max() <= TOLERANCE[str(dtype).removeprefix("torch.")], f"max {diff.max():.3g} mean {diff.mean():.3g}"
    decodes = [(1, c) for c in (1, 17, 700, 5000, 9000)]
    q, k_cache, v_cache, cu, context, tables = (t.cuda() for t in build(dtype, 32, 8, 128, 16, decodes))
    want = paged_attention_reference(q.float(), k_cache.float(), v_cache.float(), cu, context, tables)
    split = decode_split_len(9000, len(decodes), 8)
    got = paged_decode(q, k_cache, v_cache, context, tables, split_len=split, max_splits=-(-9000 // split))
    diff = (got.float() - want).abs()
    assert diff.max() <= TOLERANCE[str(dtype).removeprefix("torch.")], f"max {diff.max():.3g} mean {diff.mean():.3g}"


def test_the_prefill_grid_has_one_program_per_kv_head_not_per_query_head(monkeypatch):
    """Issue 46, finding 12: a program per query head read each K/V tile once per head of its group (7x the reads for
    Qwen2.5-7B's 28 heads over 4 KV heads). The grid is now per KV head, each tile holding the group's heads;
    the interpreted parity cases (prefill_*_gqa1/4/7/8, head dims 64-256) check the grouped kernel's results."""
    import kernels.paged_attention_triton as triton_kernels
    from tests.kernels._paged_attention_cases import build

    grids = []

    class Recorder:
        def __getitem__(self, grid):
            grids.append(grid)
            return lambda *args, **kwargs: None

    monkeypatch.setattr(triton_kernels, "_prefill_kernel", Recorder())
    q, k_cache, v_cache, cu, context, tables = build(torch.float32, 28, 4, 16, 16, [(100, 100), (64, 300)])
    triton_kernels.paged_prefill(q, k_cache, v_cache, cu, context, tables, 100, block_m=64)
    group, rows, queries = triton_kernels.prefill_tile(7, 64)
    assert (group, rows, queries) == (8, 64, 8)  # 8 queries x the group's 7 heads (padded to 8) per tile
    assert grids == [(2, 4, -(-100 // queries))], grids
