"""Run by tests/kernels/test_bm25_triton.py in a subprocess with TRITON_INTERPRET=1.

Prints one JSON object: how many (query, k, mask) cases the Triton backend got identical to the
reference (ids equal, scores within 1e-5), out of how many, and the largest score difference.
"""

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from kernels import ScoreMatrix, topk_batch, topk_reference  # noqa: E402
from kernels.bm25_triton import GpuScoreMatrix  # noqa: E402
from tests.kernels.conftest import build_bm25s, random_queries, zipf_corpus  # noqa: E402


def main() -> None:
    retriever = build_bm25s(zipf_corpus(1500, 150, seed=3))
    matrix = ScoreMatrix.from_bm25s(retriever)
    gpu = GpuScoreMatrix.from_matrix(matrix, "cpu")
    queries = random_queries(retriever, 12, seed=9, max_len=4)
    mask = np.random.default_rng(0).random(matrix.num_docs) < 0.5
    same = total = 0
    worst = 0.0
    for k in (1, 5, 70):
        for cand in (None, mask):
            results = topk_batch(gpu, queries, k, candidates=cand, backend="auto")
            for query, (ids, scores) in zip(queries, results):
                ref_ids, ref_scores = topk_reference(matrix, query, k, candidates=cand)
                total += 1
                if len(ids) == len(ref_ids):
                    diff = float(np.abs(ref_scores.astype(np.float64) - scores).max()) if len(ids) else 0.0
                    worst = max(worst, diff)
                    same += int(np.array_equal(ids, ref_ids) and diff <= 1e-5)
    print(json.dumps({"identical": same, "cases": total, "max_score_diff": worst}))


if __name__ == "__main__":
    main()
