"""Numba backend for BM25 top-k: the jit-ready blocked MaxScore kernel compiled with the GIL released.

`topk_batch_numba` splits a batch of queries into chunks and runs them on a thread pool; each
chunk is one call of the compiled kernel, which holds no GIL, so threads scale across cores.
The first call compiles (a few seconds); `cache=True` keeps the machine code on disk for the
next process.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .bm25_taat import blocked_topk_jit_ready

try:
    from numba import njit
except ImportError as error:  # pragma: no cover - numba is a core dependency
    raise ImportError("the numba BM25 backend needs numba; install it with: pip install numba==0.68.1") from error

__all__ = ["topk_batch_numba", "blocked_topk", "BLOCK_SHIFT"]

blocked_topk = njit(nogil=True, cache=True)(blocked_topk_jit_ready)

BLOCK_SHIFT = 14  # 2^14-doc blocks: a 64 KiB float32 accumulator stays in L1/L2 (measured best of 12..18)


def topk_batch_numba(matrix, queries: list[np.ndarray], k: int, *, candidates: np.ndarray | None = None,
                     threads: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Run the MaxScore kernel over checked int64 queries; see `kernels.bm25.topk_batch`."""
    n_queries = len(queries)
    k = max(0, min(int(k), matrix.num_docs))
    if n_queries == 0:
        return []
    if k == 0:
        return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in queries]
    query_ptr = np.zeros(n_queries + 1, dtype=np.int64)
    np.cumsum([len(q) for q in queries], out=query_ptr[1:])
    flat = np.concatenate(queries).astype(np.int64) if query_ptr[-1] else np.zeros(0, np.int64)
    out_ids = np.empty((n_queries, k), dtype=np.int64)
    out_scores = np.empty((n_queries, k), dtype=np.float32)
    out_counts = np.zeros(n_queries, dtype=np.int64)
    has_mask = candidates is not None
    mask = candidates if has_mask else np.zeros(1, dtype=np.bool_)
    args = (matrix.data, matrix.indices, matrix.indptr, matrix.term_upper, flat, query_ptr)
    # small corpora get a block no larger than themselves (less to allocate per call)
    shift = min(BLOCK_SHIFT, max(6, int(matrix.num_docs - 1).bit_length()))

    def run(lo: int, hi: int) -> None:
        blocked_topk(*args, lo, hi, k, mask, has_mask, shift, out_ids, out_scores, out_counts)

    workers = min(threads or os.cpu_count() or 1, n_queries)
    if workers <= 1:
        run(0, n_queries)
    else:
        # several chunks per worker so one slow query does not idle the others
        bounds = np.linspace(0, n_queries, min(n_queries, workers * 8) + 1).astype(int)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda b: run(b[0], b[1]), zip(bounds[:-1], bounds[1:])))
    return [(out_ids[i, : out_counts[i]].copy(), out_scores[i, : out_counts[i]].copy()) for i in range(n_queries)]
