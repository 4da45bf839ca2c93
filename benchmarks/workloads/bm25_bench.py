"""BM25 top-k benchmark: our kernels against bm25s's Numba backend on the same score matrix.

Used by `dossier bench bm25` and `benchmarks/bench_bm25.py`. Queries are 3-5 distinct
mid-frequency words (document frequency between `df_low` and `df_high` pages). For the scaling
figure the small corpus gets, for every big-corpus query, the words whose document frequencies
are closest to the big query's, so both scales read the same number of postings per query.

Parity is judged the way the contract defines results: bm25s zero-fills and orders ties
arbitrarily, so its top-k is put in (score desc, id asc) order and its zero-score fillers are
dropped; then ids must be equal and scores within 1e-5. bm25s's heap also keeps an arbitrary
member of the group of docs tied at the k-th score (ours keeps the lowest ids), so a query may
differ only there: `topk_tie_only_queries` counts those (same scores, same ids above the k-th
score), `topk_identical_strict_queries` the queries with equal ids everywhere, and
`topk_identical` is true when every query is one or the other.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from kernels.bm25 import ScoreMatrix, topk_batch
from .bm25_synthetic import SyntheticRecipe, load_or_build

__all__ = ["mid_frequency_queries", "df_matched_queries", "bm25s_retriever", "compare_with_bm25s", "run_bm25_bench",
           "run_bm25_gpu_bench"]

SCORE_TOL = 1e-5


def doc_freqs(matrix: ScoreMatrix) -> np.ndarray:
    return np.diff(np.asarray(matrix.indptr, dtype=np.int64))


def mid_frequency_queries(matrix: ScoreMatrix, n: int, seed: int, df_low: int, df_high: int,
                          terms: tuple[int, int] = (3, 5)) -> list[np.ndarray]:
    """`n` queries of terms[0]..terms[1] distinct words with df in [df_low, df_high]."""
    df = doc_freqs(matrix)
    pool = np.flatnonzero((df >= df_low) & (df <= df_high))
    if len(pool) < terms[1]:
        raise ValueError(f"only {len(pool)} words have df in [{df_low}, {df_high}]; widen the band")
    rng = np.random.default_rng(seed)
    return [rng.choice(pool, size=rng.integers(terms[0], terms[1] + 1), replace=False).astype(np.int64)
            for _ in range(n)]


def df_matched_queries(queries: list[np.ndarray], df_from: np.ndarray, df_to: np.ndarray) -> list[np.ndarray]:
    """For each query, distinct words of the other corpus with the nearest document frequency."""
    by_df = np.argsort(df_to, kind="stable")
    sorted_df = df_to[by_df]
    out = []
    for query in queries:
        chosen: list[int] = []
        for token in query:
            at = int(np.searchsorted(sorted_df, df_from[token]))
            for radius in range(len(sorted_df)):  # nearest unused word, alternating sides
                for cand in (at + radius, at - radius - 1):
                    if 0 <= cand < len(sorted_df) and int(by_df[cand]) not in chosen:
                        chosen.append(int(by_df[cand]))
                        break
                else:
                    continue
                break
        out.append(np.array(chosen, dtype=np.int64))
    return out


def bm25s_retriever(matrix: ScoreMatrix, backend: str = "numba"):
    """A bm25s.BM25 (numba backend by default) searching exactly `matrix`'s arrays."""
    import bm25s

    retriever = bm25s.BM25(backend=backend)
    retriever.scores = {"data": matrix.data, "indices": matrix.indices, "indptr": matrix.indptr,
                        "num_docs": matrix.num_docs}
    retriever.vocab_dict = {str(t): t for t in range(matrix.vocab_size)}
    retriever.unique_token_ids_set = set(range(matrix.vocab_size))
    retriever.nonoccurrence_array = None
    return retriever


def _bm25s_topk(retriever, queries: list[np.ndarray], k: int, threads: int):
    lists = [q.tolist() for q in queries]
    result = retriever.retrieve(lists, k=k, n_threads=threads, show_progress=False)
    return result.documents, result.scores


def compare_with_bm25s(ours: list[tuple[np.ndarray, np.ndarray]], docs: np.ndarray, scores: np.ndarray) -> dict:
    """Count identical top-k lists (see module docstring) and the largest score difference."""
    identical = tie_only = 0
    max_diff = 0.0
    for (ids, ours_scores), bdocs, bscores in zip(ours, docs, scores):
        keep = bscores > 0
        bdocs, bscores = bdocs[keep].astype(np.int64), bscores[keep]
        order = np.lexsort((bdocs, -bscores.astype(np.float64)))
        bdocs, bscores = bdocs[order], bscores[order]
        if len(bdocs) != len(ids):
            continue
        if len(ids):
            max_diff = max(max_diff, float(np.abs(bscores.astype(np.float64) - ours_scores).max()))
        same_scores = len(ids) == 0 or np.abs(bscores.astype(np.float64) - ours_scores).max() <= SCORE_TOL
        if same_scores and np.array_equal(bdocs, ids):
            identical += 1
        elif same_scores:
            kth = ours_scores[-1]
            if np.array_equal(bdocs[bscores > kth], ids[ours_scores > kth]):
                tie_only += 1
    return {"identical": identical, "tie_only_differences": tie_only, "max_score_diff": max_diff}


def _best_times(fns, repeats: int) -> list[float]:
    """Best-of-`repeats` wall time of each function, interleaved so both see the same machine load."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def run_bm25_bench(num_docs: int = 1_000_000, small_docs: int = 100_000, n_queries: int = 1000, k: int = 5,
                   seed: int = 0, df_low: int | None = None, df_high: int | None = None, repeats: int = 3,
                   threads: int = 2, cache_dir=None, log=print) -> dict:
    """Build (or load) the corpora, time both systems, check parity; returns the figures as a dict.

    The mid-frequency band defaults to document frequencies of 0.1%..2% of the pages
    (1,000..20,000 at 1M pages).
    """
    df_low = df_low if df_low is not None else max(1, num_docs // 1000)
    df_high = df_high if df_high is not None else max(df_low + 1, num_docs // 50)
    recipe = SyntheticRecipe(num_docs=num_docs, seed=seed)
    log(f"corpus {recipe.key()} (cached after the first build)")
    big = load_or_build(recipe, cache_dir)
    queries = mid_frequency_queries(big, n_queries, seed, df_low, df_high)
    postings = float(np.mean([doc_freqs(big)[q].sum() for q in queries]))
    retriever = bm25s_retriever(big)

    # warm up: JIT compilation and page cache for both
    topk_batch(big, queries[:20], k, backend="numba", threads=1)
    _bm25s_topk(retriever, queries[:20], k, 1)

    ours = topk_batch(big, queries, k, backend="numba", threads=1)
    bdocs, bscores = _bm25s_topk(retriever, queries, k, 1)
    parity = compare_with_bm25s(ours, bdocs, bscores)

    ours_s, peer_s = _best_times([lambda: topk_batch(big, queries, k, backend="numba", threads=1),
                                  lambda: _bm25s_topk(retriever, queries, k, 1)], repeats)
    log(f"1 thread: ours {n_queries / ours_s:,.0f} q/s, bm25s {n_queries / peer_s:,.0f} q/s")
    _bm25s_topk(retriever, queries[:20], k, threads)  # compiles bm25s's parallel variant
    ours_mt, peer_mt = _best_times([lambda: topk_batch(big, queries, k, backend="numba", threads=threads),
                                    lambda: _bm25s_topk(retriever, queries, k, threads)], repeats)
    log(f"{threads} threads: ours {n_queries / ours_mt:,.0f} q/s, bm25s {n_queries / peer_mt:,.0f} q/s")

    result = {
        "num_docs": num_docs, "nnz": big.nnz, "queries": n_queries, "k": k, "seed": seed,
        "df_band": [df_low, df_high], "postings_per_query": round(postings, 1),
        "qps_ours": round(n_queries / ours_s, 1), "qps_bm25s": round(n_queries / peer_s, 1),
        "qps_ratio_vs_bm25s": round(peer_s / ours_s, 2),
        "threads": threads, "qps_ours_mt": round(n_queries / ours_mt, 1),
        "qps_bm25s_mt": round(n_queries / peer_mt, 1), "qps_ratio_vs_bm25s_mt": round(peer_mt / ours_mt, 2),
        # identical modulo bm25s's arbitrary pick inside the tie group at the k-th place
        "topk_identical": parity["identical"] + parity["tie_only_differences"] == n_queries,
        "topk_identical_strict_queries": parity["identical"],
        "topk_tie_only_queries": parity["tie_only_differences"],
        "max_score_diff": parity["max_score_diff"],
    }
    if small_docs:
        small = load_or_build(replace(recipe, num_docs=small_docs), cache_dir)
        small_queries = df_matched_queries(queries, doc_freqs(big), doc_freqs(small))
        small_postings = float(np.mean([doc_freqs(small)[q].sum() for q in small_queries]))
        small_retriever = bm25s_retriever(small)
        topk_batch(small, small_queries[:20], k, backend="numba", threads=1)
        _bm25s_topk(small_retriever, small_queries[:20], k, 1)
        ours_small, peer_small = _best_times([
            lambda: topk_batch(small, small_queries, k, backend="numba", threads=1),
            lambda: _bm25s_topk(small_retriever, small_queries, k, 1)], repeats)
        result.update({
            "small_num_docs": small_docs, "small_postings_per_query": round(small_postings, 1),
            "us_per_query_ours": round(1e6 * ours_s / n_queries, 2),
            "us_per_query_ours_small": round(1e6 * ours_small / n_queries, 2),
            "us_per_query_bm25s": round(1e6 * peer_s / n_queries, 2),
            "us_per_query_bm25s_small": round(1e6 * peer_small / n_queries, 2),
            "scaling_ratio_ours": round(ours_s / ours_small, 2),
            "scaling_ratio_bm25s": round(peer_s / peer_small, 2),
        })
    return result


def run_bm25_gpu_bench(num_docs: int = 1_000_000, n_queries: int = 4096, batch: int = 512, k: int = 5, seed: int = 0,
                       df_low: int = 1000, df_high: int = 20000, cache_dir=None, log=print) -> dict:
    """Batched QPS of the Triton backend on CUDA against our single-thread Numba kernel, same queries."""
    import torch

    from kernels.bm25_triton import GpuScoreMatrix

    if not torch.cuda.is_available():
        raise RuntimeError("the GPU BM25 figure needs a CUDA device")
    matrix = load_or_build(SyntheticRecipe(num_docs=num_docs, seed=seed), cache_dir)
    queries = mid_frequency_queries(matrix, n_queries, seed, df_low, df_high)
    gpu = GpuScoreMatrix.from_matrix(matrix, "cuda")
    run_gpu = lambda: [topk_batch(gpu, queries[i:i + batch], k) for i in range(0, n_queries, batch)]  # noqa: E731
    run_gpu()
    torch.cuda.synchronize()
    ours = topk_batch(matrix, queries, k, backend="numba", threads=1)
    gpu_results = [r for part in run_gpu() for r in part]
    identical = sum(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(ours, gpu_results))
    (gpu_s, cpu_s) = _best_times([lambda: (run_gpu(), torch.cuda.synchronize()),
                                  lambda: topk_batch(matrix, queries, k, backend="numba", threads=1)], 3)
    log(f"GPU {n_queries / gpu_s:,.0f} q/s (batch {batch}), numba 1 thread {n_queries / cpu_s:,.0f} q/s")
    return {"num_docs": num_docs, "queries": n_queries, "batch": batch, "k": k,
            "qps_triton": round(n_queries / gpu_s, 1), "qps_numba_1thread": round(n_queries / cpu_s, 1),
            "identical_to_numba": identical == n_queries}
