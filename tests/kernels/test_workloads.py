"""The synthetic benchmark corpus is bm25s's own index of the sampled tokens, bit for bit."""

import numpy as np

from kernels import topk_batch
from benchmarks.workloads import SyntheticRecipe, build_score_matrix, load_or_build, sample_tokens
from benchmarks.workloads.bm25_bench import (bm25s_retriever, compare_with_bm25s, df_matched_queries, doc_freqs,
                                          mid_frequency_queries)


def test_synthetic_matrix_equals_bm25s_index():
    import bm25s

    recipe = SyntheticRecipe(num_docs=1500, vocab_size=800, seed=4)
    matrix = build_score_matrix(recipe, threads=2)
    tokens, ptr = sample_tokens(recipe, threads=1)  # same corpus whatever the thread count
    corpus = [tokens[ptr[i]:ptr[i + 1]].tolist() for i in range(recipe.num_docs)]
    expected = bm25s.BM25(method="lucene").build_index_from_ids(list(range(recipe.vocab_size)), corpus,
                                                                 show_progress=False)
    assert np.array_equal(expected["indptr"], matrix.indptr)
    assert np.array_equal(expected["indices"], matrix.indices)
    diff = np.abs(expected["data"].astype(np.float64) - matrix.data)
    assert diff.max() == 0.0, f"score diff max {diff.max():.3g} mean {diff.mean():.3g}"
    lengths = np.diff(ptr)
    assert 0.8 * recipe.mean_doc_len < lengths.mean() < 1.2 * recipe.mean_doc_len


def test_cache_and_bench_parity_with_bm25s(tmp_path):
    recipe = SyntheticRecipe(num_docs=4000, vocab_size=3000, seed=1)
    matrix = load_or_build(recipe, tmp_path)
    again = load_or_build(recipe, tmp_path)  # from the cache, memory-mapped
    assert isinstance(again.data, np.memmap) and np.array_equal(matrix.data, again.data)
    queries = mid_frequency_queries(matrix, 200, seed=0, df_low=20, df_high=400)
    ours = topk_batch(matrix, queries, 5, backend="numba", threads=2)
    # bm25s's numpy backend: same scores and top-k semantics, without its numba compile in the test
    result = bm25s_retriever(matrix, backend="numpy").retrieve([q.tolist() for q in queries], k=5, n_threads=1, show_progress=False)
    parity = compare_with_bm25s(ours, result.documents, result.scores)
    assert parity["identical"] + parity["tie_only_differences"] == len(queries), parity
    assert parity["max_score_diff"] <= 1e-5


def test_df_matched_queries_hold_postings_fixed(tmp_path):
    big = load_or_build(SyntheticRecipe(num_docs=4000, vocab_size=3000, seed=1), tmp_path)
    small = load_or_build(SyntheticRecipe(num_docs=1000, vocab_size=3000, seed=1), tmp_path)
    queries = mid_frequency_queries(big, 50, seed=0, df_low=20, df_high=100)
    matched = df_matched_queries(queries, doc_freqs(big), doc_freqs(small))
    assert all(len(set(q.tolist())) == len(q) for q in matched)
    big_postings = np.mean([doc_freqs(big)[q].sum() for q in queries])
    small_postings = np.mean([doc_freqs(small)[q].sum() for q in matched])
    assert abs(big_postings - small_postings) < 0.02 * big_postings
