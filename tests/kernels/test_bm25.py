"""BM25 top-k: the reference against bm25s, and every CPU backend against the reference."""

import numpy as np
import pytest

from kernels import ScoreMatrix, topk, topk_batch, topk_reference
from kernels.bm25_taat import blocked_topk_jit_ready

from .conftest import build_bm25s, random_queries, zipf_corpus

SCORE_TOL = 1e-5  # the contract's tolerance; the CPU backends are in fact bit-identical


def _assert_same(expected, got, label):
    (eid, esc), (gid, gsc) = expected, got
    assert len(eid) == len(gid), f"{label}: {len(gid)} results, expected {len(eid)}"
    if len(eid):
        diff = np.abs(esc.astype(np.float64) - gsc)
        assert diff.max() <= SCORE_TOL, f"{label}: score diff max {diff.max():.3g} mean {diff.mean():.3g}"
    assert np.array_equal(eid, gid), f"{label}: ids {gid.tolist()} != {eid.tolist()}"


def test_reference_scores_are_bm25s_scores_bit_for_bit(small_bm25s):
    retriever, _ = small_bm25s
    matrix = ScoreMatrix.from_bm25s(retriever)
    matrix.check_sorted()
    for query in random_queries(retriever, 100, seed=1):
        dense = retriever.get_scores_from_ids(query.tolist())
        ids, scores = topk_reference(matrix, query, 20)
        assert np.array_equal(dense[ids], scores)
        # every doc not returned scores no higher than the last one returned
        if len(ids) == 20:
            rest = np.delete(dense, ids)
            assert rest.max() <= scores[-1]
        # scores descending, ties by ascending id
        key = list(zip(-scores.astype(np.float64), ids))
        assert key == sorted(key)


def test_reference_matches_bm25s_retrieve_modulo_ties_and_zero_fill(small_bm25s):
    """bm25s pads with zero-score docs and orders ties arbitrarily; the scored docs must agree."""
    retriever, _ = small_bm25s
    matrix = ScoreMatrix.from_bm25s(retriever)
    queries = random_queries(retriever, 200, seed=2)
    docs, scores = retriever.retrieve([q.tolist() for q in queries], k=10, show_progress=False, n_threads=1)
    tie_only = 0
    for query, bdocs, bscores in zip(queries, docs, scores):
        ids, ours = topk_reference(matrix, query, 10)
        scored = bscores > 0
        assert np.array_equal(np.sort(bscores[scored])[::-1], ours[ours > 0])
        if set(bdocs[scored]) != set(ids[ours > 0]):
            # only allowed inside the tie group at the k-th score
            kth = ours[-1]
            assert set(bdocs[scored][bscores[scored] > kth]) == set(ids[ours > kth])
            tie_only += 1
    assert tie_only < len(queries)


@pytest.mark.parametrize("k", [1, 5, 10, 200])
@pytest.mark.parametrize("masked", [False, True])
def test_numba_equals_reference(small_bm25s, k, masked):
    retriever, _ = small_bm25s
    matrix = ScoreMatrix.from_bm25s(retriever)
    mask = np.random.default_rng(k).random(matrix.num_docs) < 0.25 if masked else None
    queries = random_queries(retriever, 150, seed=k + 10 * masked)
    results = topk_batch(matrix, queries, k, candidates=mask, backend="numba", threads=2)
    for i, (query, got) in enumerate(zip(queries, results)):
        _assert_same(topk_reference(matrix, query, k, candidates=mask), got, f"query {i} {query.tolist()}")


def test_jit_ready_source_runs_unjitted(small_bm25s):
    """The kernel's plain-Python source is the numba kernel: it gives the same answers un-jitted."""
    retriever, _ = small_bm25s
    matrix = ScoreMatrix.from_bm25s(retriever)
    queries = random_queries(retriever, 5, seed=3, max_len=3)
    ptr = np.cumsum([0] + [len(q) for q in queries]).astype(np.int64)
    ids = np.zeros((5, 5), np.int64)
    scores = np.zeros((5, 5), np.float32)
    counts = np.zeros(5, np.int64)
    blocked_topk_jit_ready(matrix.data, matrix.indices, matrix.indptr, matrix.term_upper, np.concatenate(queries),
                           ptr, 0, 5, 5, np.zeros(1, np.bool_), False, 8, ids, scores, counts)
    for i, query in enumerate(queries):
        _assert_same(topk_reference(matrix, query, 5), (ids[i, :counts[i]], scores[i, :counts[i]]), f"query {i}")


def test_duplicates_empty_and_zero_semantics(small_bm25s):
    retriever, _ = small_bm25s
    matrix = ScoreMatrix.from_bm25s(retriever)
    token = retriever.vocab_dict["w3"]
    once = topk(matrix, np.array([token]), 5)
    twice = topk(matrix, np.array([token, token]), 5)
    assert np.array_equal(once[0], twice[0])
    assert np.allclose(twice[1], 2 * once[1])  # a repeated token counts twice, as in bm25s
    for backend in ("reference", "numba"):
        ids, scores = topk(matrix, np.array([], dtype=np.int64), 5, backend=backend)
        assert len(ids) == 0 and scores.dtype == np.float32
        # a rare token: fewer matches than k, never zero-filled...
        rare = retriever.vocab_dict["w399"]
        ids, scores = topk(matrix, np.array([rare]), 50, backend=backend)
        df = int(matrix.indptr[rare + 1] - matrix.indptr[rare])
        assert len(ids) == df < 50 and (scores > 0).all()
        # ...unless asked: the rest come in ascending id with score 0
        ids, scores = topk(matrix, np.array([rare]), 50, include_zero=True, backend=backend)
        assert len(ids) == 50 and (scores[df:] == 0).all()
        assert np.array_equal(ids[df:], np.sort(np.setdiff1d(np.arange(matrix.num_docs), ids[:df]))[: 50 - df])
        # pure filter: only candidates, ascending
        mask = np.zeros(matrix.num_docs, bool)
        mask[[5, 17, 900]] = True
        ids, scores = topk(matrix, np.array([], dtype=np.int64), 10, candidates=mask, include_zero=True,
                           backend=backend)
        assert ids.tolist() == [5, 17, 900] and (scores == 0).all()


def test_bm25_plus_constant_and_mmap(tmp_path):
    corpus = zipf_corpus(500, 120, seed=11)
    retriever = build_bm25s(corpus, method="bm25+")
    retriever.save(tmp_path)
    import bm25s

    loaded = bm25s.BM25.load(tmp_path, mmap=True)
    matrix = ScoreMatrix.from_bm25s(loaded)
    assert isinstance(matrix.data, np.memmap)
    for query in random_queries(loaded, 40, seed=5):
        dense = loaded.get_scores_from_ids(query.tolist())
        ref = topk_reference(matrix, query, 7)
        assert np.array_equal(dense[ref[0]], ref[1])  # includes the BM25+ non-occurrence constant
        _assert_same(ref, topk(matrix, query, 7, backend="numba"), f"bm25+ {query.tolist()}")


def test_bad_input_is_reported(small_bm25s):
    retriever, _ = small_bm25s
    matrix = ScoreMatrix.from_bm25s(retriever)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        topk(matrix, np.array([matrix.vocab_size + 3]), 5)
    with pytest.raises(ValueError, match="bool mask"):
        topk(matrix, np.array([1]), 5, candidates=np.ones(3, bool))
    with pytest.raises(ValueError, match="unknown BM25 backend"):
        topk(matrix, np.array([1]), 5, backend="gpu")
    with pytest.raises(ValueError, match="float32"):
        ScoreMatrix(matrix.data.astype(np.float64), matrix.indices, matrix.indptr, matrix.num_docs)
    unsorted = matrix.indices.copy()
    start = int(matrix.indptr[0])
    unsorted[start], unsorted[start + 1] = unsorted[start + 1], unsorted[start]
    with pytest.raises(ValueError, match="not strictly ascending"):
        ScoreMatrix(matrix.data, unsorted, matrix.indptr, matrix.num_docs).check_sorted()
