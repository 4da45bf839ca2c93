"""Run by tests/search/test_gpu_paths.py in a subprocess with TRITON_INTERPRET=1.

The production GPU paths of search, with their tensors on the CPU so the Triton kernels run
interpreted: a `Searcher` whose score matrix is a `GpuScoreMatrix` (what `--device cuda` builds)
against the numba path, on bag-of-words and Boolean queries (candidate masks, zero-score fill,
a document filter); and HEAVEN late-interaction reranking over an embedding store moved to
tensors and scored by the fused Triton MaxSim kernel (what `--late-device cuda` builds) against
the memory-mapped store scored by torch. Prints one JSON object.
"""

import json
import os
import random
import sys
import tempfile
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from kernels.bm25_triton import GpuScoreMatrix  # noqa: E402
from tests.pdfs import make_text_store  # noqa: E402
from tools.search import Searcher, build_index  # noqa: E402

WORDS = ("revenue income net capital expenditure cash flow 2018 2019 q3 10-k $1,577 menu spaghetti "
         "form member fee notice water street memo warehouse").split()
QUERIES = [("revenue 2018", "bag"), ("revenue AND NOT cash", "boolean"), ('"capital expenditure"', "boolean"),
           ("memo OR fee", "boolean"), ("NOT warehouse", "boolean"), ("cash flow capital", "bag")]


def bm25(corpus: Path) -> dict:
    cpu = Searcher(corpus)
    gpu = Searcher(corpus)
    gpu.matrix = GpuScoreMatrix.from_matrix(gpu.index.matrix, "cpu")  # `--device cuda`, tensors on the CPU
    same = total = 0
    worst = 0.0
    for i, (query, mode) in enumerate(QUERIES):
        for document in (None, "doc03") if i % 2 else (None,):
            want = cpu.search(query, k=7, mode=mode, document=document, snippets=False)
            got = gpu.search(query, k=7, mode=mode, document=document, snippets=False)
            total += 1
            if [(h.document, h.page) for h in got] == [(h.document, h.page) for h in want]:
                same += 1
                worst = max([worst] + [abs(a.score - b.score) for a, b in zip(got, want)])
    return {"backend_cpu": cpu.device, "queries": total, "identical_rankings": same, "max_score_diff": worst}


def maxsim(corpus: Path) -> dict:
    from tools.late import HeavenConfig, LateReranker, bm25_first_stage, build_late_index, load_encoder
    from tools.late.store import EmbeddingStore

    encoder = load_encoder("minilm")
    build_late_index(corpus, "minilm", dtype="int8", encoder=encoder, batch_pages=16)
    store = EmbeddingStore.open(corpus / "late" / "minilm")
    config = HeavenConfig(first_k=30, key_keep=10)
    cpu = LateReranker(encoder, store, config)
    gpu = LateReranker(encoder, store.to_device("cpu", backend="triton"), config)  # `--late-device cuda`
    first = bm25_first_stage(Searcher(corpus))
    same = total = 0
    worst = 0.0
    for query, _ in QUERIES[:3]:
        want = cpu.search(query, first, k=5)
        got = gpu.search(query, first, k=5)
        total += 1
        same += got.rows.tolist() == want.rows.tolist()
        worst = max(worst, float(np.abs(got.scores - want.scores).max()))
    rows = np.arange(store.num_pages)
    query = encoder.encode_queries(["capital expenditure 2018"])[0].vectors
    direct = float(np.abs(gpu.store.maxsim(query, rows) - store.maxsim(query, rows)).max())
    return {"store_backend": gpu.store.backend, "queries": total, "identical_rankings": same,
            "max_fused_score_diff": worst, "max_maxsim_diff_all_pages": direct}


def main() -> None:
    rng = random.Random(0)
    docs = {f"doc{d:02d}": [" ".join(rng.choices(WORDS, k=rng.randint(3, 50))) for _ in range(6)] for d in range(10)}
    corpus = Path(tempfile.mkdtemp(prefix="gpu-paths-")) / "c"
    build_index(make_text_store(corpus, docs))
    print(json.dumps({"bm25": bm25(corpus), "maxsim": maxsim(corpus)}))


if __name__ == "__main__":
    main()
