"""The Triton BM25 backend against the reference: interpreted on the CPU, and on CUDA when present."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_triton_bm25_equals_reference_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("_bm25_triton_check.py"))], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["identical"] == report["cases"], report
    assert report["max_score_diff"] == 0.0, report  # same float32 order as bm25s: bit-identical


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_triton_bm25_on_gpu(small_bm25s):
    from kernels import ScoreMatrix, topk_batch
    from kernels.bm25_triton import GpuScoreMatrix

    from .conftest import random_queries

    retriever, _ = small_bm25s
    matrix = ScoreMatrix.from_bm25s(retriever)
    gpu = GpuScoreMatrix.from_matrix(matrix)
    queries = random_queries(retriever, 300, seed=4)
    for k in (5, 100):
        ours = topk_batch(gpu, queries, k)
        ref = topk_batch(matrix, queries, k, backend="reference")
        for (a, sa), (b, sb) in zip(ours, ref):
            assert np.array_equal(a, b) and np.array_equal(sa, sb)
