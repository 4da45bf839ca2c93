"""BM25 top-k over a bm25s-compatible score matrix: the contract, the numpy reference, dispatch.

The score matrix is bm25s's eager index: for every vocabulary token t, a posting list of
(doc id, precomputed BM25 contribution) in `data[indptr[t]:indptr[t+1]]` /
`indices[indptr[t]:indptr[t+1]]`, doc ids ascending. Searching sums the rows of the
query's tokens and keeps the best k documents.

Semantics shared by every backend (the parity tests hold them to it):
- score(d) = float32 running sum over the query's token positions, in query order, of the
  token's contribution to d (0 when d has no posting). A token listed twice counts twice.
  This is the same order and precision as bm25s (`_compute_relevance_from_scores_jit_ready`),
  so scores are bit-identical to bm25s's. For BM25L/BM25+ the constant
  `nonoccurrence[query].sum()` is added afterwards, as bm25s does; ranking uses the sum before
  that constant (it is the same for every document; its float32 rounding could merge scores).
- Eligible documents: those holding at least one posting of a query token (intersected with
  `candidates` when given). bm25s instead always returns k documents, padding with
  zero-score documents picked by its heap; we never return a document that matches no query
  token, unless `include_zero=True`: then documents without postings (all documents, or the
  `candidates`) fill the remaining slots with score 0 (+ the BM25L/BM25+ constant), in
  ascending doc id. Use that for pure-filter Boolean queries.
- Order: score descending, ties broken by ascending doc id; at most k results. (bm25s's
  heap keeps an arbitrary member of a tie group at the k-th place and orders ties
  arbitrarily; compare with it modulo ties, see `benchmarks/bench_bm25.py`.)

Backends: "reference" (numpy, this file), "numba" (`kernels/bm25_numba.py`: blocked
term-at-a-time with MaxScore skipping, no O(num_docs) work per query, GIL released),
"triton" (`kernels/bm25_triton.py`, CUDA: batched scoring + top-k), "auto" (numba when
installed, else reference; triton when given a `GpuScoreMatrix`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import bm25s

__all__ = ["ScoreMatrix", "topk", "topk_batch", "topk_reference", "BACKENDS"]

BACKENDS = ("auto", "reference", "numba", "triton")


@dataclass(slots=True, frozen=True)
class ScoreMatrix:
    """bm25s-compatible score matrix: per vocabulary token, postings of (doc id, score)."""

    data: np.ndarray  # float32 (nnz,): BM25 contribution of token t to doc d
    indices: np.ndarray  # int32 (nnz,): doc ids, ascending within each token's slice
    indptr: np.ndarray  # int32/int64 (vocab+1,): token t's postings are [indptr[t], indptr[t+1])
    num_docs: int  # number of documents (doc ids are 0..num_docs-1)
    nonoccurrence: np.ndarray | None = None  # float32 (vocab,): BM25L/BM25+ constant per token; None otherwise
    term_upper: np.ndarray | None = field(default=None)  # float32 (vocab,): max(0, max score) per token; computed if None

    def __post_init__(self) -> None:
        if self.data.ndim != 1 or self.indices.ndim != 1 or self.indptr.ndim != 1:
            raise ValueError("ScoreMatrix arrays must be 1-D (data, indices, indptr)")
        if self.data.dtype != np.float32:
            raise ValueError(f"ScoreMatrix.data must be float32, got {self.data.dtype}")
        if self.indices.dtype not in (np.int32, np.int64):
            raise ValueError(f"ScoreMatrix.indices must be int32 or int64, got {self.indices.dtype}")
        if self.indptr.dtype not in (np.int32, np.int64):
            raise ValueError(f"ScoreMatrix.indptr must be int32 or int64, got {self.indptr.dtype}")
        if len(self.data) != len(self.indices):
            raise ValueError(f"data has {len(self.data)} entries but indices has {len(self.indices)}")
        if len(self.indptr) < 1 or int(self.indptr[-1]) != len(self.data):
            raise ValueError(f"indptr[-1] must equal nnz={len(self.data)}")
        if int(self.num_docs) < 0:
            raise ValueError(f"num_docs must be >= 0, got {self.num_docs}")
        object.__setattr__(self, "num_docs", int(self.num_docs))
        if self.nonoccurrence is not None and len(self.nonoccurrence) != self.vocab_size:
            raise ValueError(f"nonoccurrence has {len(self.nonoccurrence)} entries, vocab is {self.vocab_size}")
        if self.term_upper is None:
            object.__setattr__(self, "term_upper", term_upper_bounds(self.data, self.indptr))
        elif len(self.term_upper) != self.vocab_size:
            raise ValueError(f"term_upper has {len(self.term_upper)} entries, vocab is {self.vocab_size}")

    @property
    def vocab_size(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return len(self.data)

    @classmethod
    def from_bm25s(cls, retriever: "bm25s.BM25") -> "ScoreMatrix":
        """Wrap a bm25s retriever's score arrays without copying (works with mmap-loaded ones).

        Args:
            retriever: an indexed (or loaded) `bm25s.BM25`.
        """
        scores = getattr(retriever, "scores", None)
        if not scores or "data" not in scores:
            raise ValueError("the bm25s retriever has no score matrix yet: call .index() or BM25.load() first")
        num_docs = scores.get("num_docs")
        if num_docs is None:  # bm25s's load_scores may leave it unset
            num_docs = int(scores["indices"].max()) + 1 if len(scores["indices"]) else 0
        data = scores["data"]
        if data.dtype != np.float32:
            data = data.astype(np.float32)
        return cls(
            data=data,
            indices=scores["indices"],
            indptr=scores["indptr"],
            num_docs=int(num_docs),
            nonoccurrence=getattr(retriever, "nonoccurrence_array", None),
        )

    @classmethod
    def load_bm25s_dir(cls, folder) -> "ScoreMatrix":
        """The score matrix of a folder written by `bm25s.BM25.save`, memory-mapped, without importing bm25s.

        The same arrays `bm25s.BM25.load(folder, mmap=True)` maps (its `data/indices/indptr.csc.index.npy`,
        `num_docs` from `params.index.json`, and `nonoccurrence_array.index.npy` for BM25L/BM25+), for a
        process that only searches: importing bm25s loads numba and scipy, 0.2 s of a cold `dossier search`.
        tests/search/test_search.py checks it against bm25s's own load.
        """
        import json
        from pathlib import Path

        folder = Path(folder)
        params = json.loads((folder / "params.index.json").read_text())
        data, indices, indptr = (np.load(folder / f"{name}.csc.index.npy", mmap_mode="r")
                                 for name in ("data", "indices", "indptr"))
        num_docs = params.get("num_docs")
        if num_docs is None:
            num_docs = int(indices.max()) + 1 if len(indices) else 0
        nonoccurrence = None
        if params.get("method") in ("bm25l", "bm25+"):
            nonoccurrence = np.load(folder / "nonoccurrence_array.index.npy")
        return cls(data=data if data.dtype == np.float32 else data.astype(np.float32), indices=indices,
                   indptr=indptr, num_docs=int(num_docs), nonoccurrence=nonoccurrence)

    def check_sorted(self) -> None:
        """Raise ValueError unless every token's doc ids are strictly ascending (O(nnz))."""
        if self.nnz == 0:
            return
        step = np.diff(self.indices.astype(np.int64))
        # a descent is allowed only where a new token's slice starts
        bad = np.flatnonzero(step <= 0) + 1
        starts = np.asarray(self.indptr[1:-1], dtype=np.int64)
        bad = bad[~np.isin(bad, starts)]
        if len(bad):
            raise ValueError(f"doc ids are not strictly ascending within a token at postings {bad[:5].tolist()}")
        if self.indices.min() < 0 or self.indices.max() >= self.num_docs:
            raise ValueError(f"doc ids must lie in [0, {self.num_docs})")


def term_upper_bounds(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Per token max(0, max contribution): the MaxScore upper bound, float32 (vocab,).

    Pruning assumes contributions are >= 0 (true for every bm25s method); a token with a
    negative contribution gets +inf, which switches pruning off for queries that use it.
    """
    vocab = len(indptr) - 1
    upper = np.zeros(vocab, dtype=np.float32)
    starts = np.asarray(indptr[:-1], dtype=np.int64)
    nonempty = np.flatnonzero(np.asarray(indptr[1:], dtype=np.int64) > starts)
    if len(nonempty):
        data = np.asarray(data)
        upper[nonempty] = np.maximum.reduceat(data, starts[nonempty])
        lowest = np.minimum.reduceat(data, starts[nonempty])
        upper[nonempty[lowest < 0]] = np.inf
    np.maximum(upper, 0.0, out=upper)
    return upper


def _check_query(matrix: ScoreMatrix, query_ids: np.ndarray) -> np.ndarray:
    query_ids = np.asarray(query_ids)
    if query_ids.ndim != 1:
        raise ValueError(f"query_ids must be 1-D token ids, got shape {query_ids.shape}")
    if len(query_ids) and not np.issubdtype(query_ids.dtype, np.integer):
        raise ValueError(f"query_ids must be integers, got {query_ids.dtype}")
    query_ids = query_ids.astype(np.int64, copy=False)
    if len(query_ids) and (query_ids.min() < 0 or query_ids.max() >= matrix.vocab_size):
        bad = query_ids[(query_ids < 0) | (query_ids >= matrix.vocab_size)]
        raise ValueError(f"query token ids {bad[:5].tolist()} are outside the vocabulary [0, {matrix.vocab_size})")
    return query_ids


def _check_candidates(matrix: ScoreMatrix, candidates: np.ndarray | None) -> np.ndarray | None:
    if candidates is None:
        return None
    candidates = np.asarray(candidates)
    if candidates.dtype != np.bool_ or candidates.shape != (matrix.num_docs,):
        raise ValueError(
            f"candidates must be a bool mask of shape ({matrix.num_docs},), got {candidates.dtype} {candidates.shape}"
        )
    return candidates


def _offset(matrix: ScoreMatrix, query_ids: np.ndarray) -> np.float32:
    """bm25s's BM25L/BM25+ constant, computed with the same numpy call bm25s uses."""
    if matrix.nonoccurrence is None or len(query_ids) == 0:
        return np.float32(0.0)
    return np.float32(matrix.nonoccurrence[query_ids].sum())


def fill_zero(matrix: ScoreMatrix, ids: np.ndarray, scores: np.ndarray, k: int,
              candidates: np.ndarray | None, offset: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """`include_zero`: pad with eligible docs not already returned, ascending id, score `offset`."""
    missing = k - len(ids)
    if missing <= 0:
        return ids, scores
    pool = np.flatnonzero(candidates) if candidates is not None else None
    taken = np.zeros(matrix.num_docs, dtype=np.bool_)
    taken[ids] = True
    if pool is None:
        extra = np.flatnonzero(~taken)[:missing]
    else:
        extra = pool[~taken[pool]][:missing]
    # a scored doc may itself score exactly `offset`: keep the (score desc, id asc) order
    all_ids = np.concatenate([ids, extra.astype(np.int64)])
    all_scores = np.concatenate([scores, np.full(len(extra), offset, dtype=np.float32)])
    order = np.lexsort((all_ids, -all_scores.astype(np.float64)))
    return all_ids[order], all_scores[order]


def topk_reference(matrix: ScoreMatrix, query_ids: np.ndarray, k: int, *,
                   candidates: np.ndarray | None = None, include_zero: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The plain numpy definition of `topk` (dense accumulator, full sort); O(num_docs) per query."""
    query_ids = _check_query(matrix, query_ids)
    candidates = _check_candidates(matrix, candidates)
    scores = np.zeros(matrix.num_docs, dtype=np.float32)
    touched = np.zeros(matrix.num_docs, dtype=np.bool_)
    for token in query_ids:  # query order: the float32 sums equal bm25s's bit for bit
        start, end = int(matrix.indptr[token]), int(matrix.indptr[token + 1])
        docs = matrix.indices[start:end]
        scores[docs] += matrix.data[start:end]  # doc ids are unique within a token
        touched[docs] = True
    eligible = touched if candidates is None else touched & candidates
    ids = np.flatnonzero(eligible)
    order = np.lexsort((ids, -scores[ids].astype(np.float64)))[: max(k, 0)]
    ids, top = ids[order].astype(np.int64), scores[ids[order]]
    offset = _offset(matrix, query_ids)
    if offset != 0:
        top = (top + offset).astype(np.float32)
    if include_zero:
        ids, top = fill_zero(matrix, ids, top, k, candidates, offset)
    return ids, top


def _resolve(backend: str, matrix) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown BM25 backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    if type(matrix).__name__ == "GpuScoreMatrix":
        return "triton"
    try:
        import numba  # noqa: F401
    except ImportError:
        return "reference"
    return "numba"


def topk(matrix: ScoreMatrix, query_ids: np.ndarray, k: int, *, candidates: np.ndarray | None = None,
         include_zero: bool = False, backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Top-k documents by the sum of the query tokens' BM25 contributions.

    Args:
        matrix: the score matrix (`ScoreMatrix.from_bm25s(retriever)`).
        query_ids: int token ids in query order; repeats count again, as in bm25s.
        k: at most this many results.
        candidates: optional bool mask (num_docs,); only these docs may be returned.
        include_zero: also return docs matching no query token (score 0) to fill k.
        backend: "auto", "reference", "numba" or "triton".

    Returns:
        (doc ids int64, scores float32), score descending, ties by ascending doc id.
    """
    name = _resolve(backend, matrix)
    if name == "reference":
        return topk_reference(matrix, query_ids, k, candidates=candidates, include_zero=include_zero)
    return topk_batch(matrix, [query_ids], k, candidates=candidates, include_zero=include_zero,
                      backend=name, threads=1)[0]


def topk_batch(matrix: ScoreMatrix, queries: list[np.ndarray], k: int, *, candidates: np.ndarray | None = None,
               include_zero: bool = False, backend: str = "auto",
               threads: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """`topk` for many queries, spread over `threads` threads (default: all cores).

    Args:
        matrix: the score matrix.
        queries: token id arrays, one per query.
        k: at most this many results per query.
        candidates: optional bool mask (num_docs,) applied to every query.
        include_zero: as in `topk`.
        backend: as in `topk`.
        threads: worker threads for the numba backend (None: os.cpu_count()).

    Returns:
        One (doc ids, scores) pair per query, in input order.
    """
    name = _resolve(backend, matrix)
    if name == "reference":
        return [topk_reference(matrix, q, k, candidates=candidates, include_zero=include_zero) for q in queries]
    if name == "numba":
        from .bm25_numba import topk_batch_numba

        checked = [_check_query(matrix, q) for q in queries]
        candidates = _check_candidates(matrix, candidates)
        results = topk_batch_numba(matrix, checked, k, candidates=candidates, threads=threads)
    else:
        from .bm25_triton import topk_batch_triton

        checked = [_check_query(matrix, q) for q in queries]
        candidates = _check_candidates(matrix, candidates)
        results = topk_batch_triton(matrix, checked, k, candidates=candidates)
    out = []
    for query_ids, (ids, scores) in zip(checked, results):
        offset = _offset(matrix, query_ids)
        if offset != 0:
            scores = (scores + offset).astype(np.float32)
        if include_zero:
            ids, scores = fill_zero(matrix, ids, scores, k, candidates, offset)
        out.append((ids, scores))
    return out
