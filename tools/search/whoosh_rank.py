"""Rank pages as Whoosh's matchers score a query tree, over the whoosh-compatible score matrix.

Whoosh (2.7) scores a page by walking the query's matchers:
- a term: its BM25F contribution (`kernels/bm25_whoosh.py`);
- a phrase: the sum of its words' contributions, on pages where the phrase occurs;
- AND: the sum of its children; a NOT child is an InverseMatcher whose score is 1.0;
- OR: the sum of the children the page matches (a NOT child again 1.0);
- NOT alone: 1.0;
- a wildcard: one expansion scores as that term; several are an OR of them with a
  "constant score" context that Whoosh's term matchers ignore (they fall back to BM25F), so
  the OR sums BM25F, unless Whoosh picks its array matcher (>= 1024 expansions, or not
  exactly 2 on an index of at most 5000 pages), which scores every page 1.0.
Ties: ascending page row (Whoosh's collector breaks ties by document number).

Most queries are sums of term contributions over a Boolean match set ("flat": terms,
phrases, ANDs, ORs of words, NOT under the top AND); those go through `kernels.bm25.topk`
with the match set as its candidates. The rest (an OR holding a phrase, an AND or a NOT) are
scored node by node from the same matrix.
"""

from __future__ import annotations

import numpy as np

from tools.search.matching import is_disjunction, match_rows
from tools.search.query import And, Empty, Node, Not, Or, Phrase, Term, Wildcard

__all__ = ["whoosh_topk"]

_ARRAY_CLAUSES = 1024  # whoosh.query.Or.TOO_MANY_CLAUSES
_ARRAY_MAX_DOCS = 5000  # Or._matcher preloads (unscored for wildcards) at or under this many documents


def _ids(index, node: Term | Wildcard) -> list[int]:
    if isinstance(node, Term):
        token = index.token_id(node.token)
        return [] if token is None else [token]
    return index.expand(node)


def _array_scored(index, expansions: int) -> bool:
    """Whether a multi-term wildcard gets Whoosh's preloaded OR (every page scores 1.0)."""
    return expansions >= _ARRAY_CLAUSES or (expansions != 2 and index.num_pages <= _ARRAY_MAX_DOCS)


def _flat(node: Node, index, top: bool = True) -> tuple[list[int], float] | None:
    """(token ids to sum, constant) when the page score is that sum on every matching page, else None."""
    if isinstance(node, Term):
        return _ids(index, node), 0.0
    if isinstance(node, Wildcard):
        ids = _ids(index, node)
        return None if len(ids) > 1 and _array_scored(index, len(ids)) else (ids, 0.0)
    if isinstance(node, Phrase):
        return [t for e in node.elements for t in _ids(index, e)], 0.0
    if isinstance(node, Not):
        return ([], 1.0) if top else None
    if isinstance(node, And):
        tokens: list[int] = []
        constant = 0.0
        for child in node.children:
            if isinstance(child, Not):
                if not top:
                    return None
                constant += 1.0
                continue
            part = _flat(child, index, top)
            if part is None:
                return None
            tokens += part[0]
            constant += part[1]
        return tokens, constant
    if isinstance(node, Or):
        tokens = []
        for child in node.children:
            if not isinstance(child, (Term, Wildcard)):
                return None
            part = _flat(child, index, top=False)
            if part is None:
                return None
            tokens += part[0]
        return tokens, 0.0
    raise AssertionError(f"unexpected query node {node!r}")


def _term_scores(index, token: int, rows: np.ndarray) -> np.ndarray:
    """A token's contributions to the sorted `rows` (0 where it does not occur), float64."""
    matrix = index.matrix
    lo, hi = int(matrix.indptr[token]), int(matrix.indptr[token + 1])
    docs = np.asarray(matrix.indices[lo:hi])
    if len(docs) == 0:
        return np.zeros(len(rows))
    at = np.minimum(np.searchsorted(docs, rows), len(docs) - 1)
    hit = docs[at] == rows
    return np.where(hit, np.asarray(matrix.data[lo:hi], dtype=np.float64)[at], 0.0)


def _scores(node: Node, index, rows: np.ndarray) -> np.ndarray:
    """Whoosh's score of each of the sorted `rows`, all of which match `node`."""
    if isinstance(node, Term):
        ids = _ids(index, node)
        return _term_scores(index, ids[0], rows) if ids else np.zeros(len(rows))
    if isinstance(node, Wildcard):
        ids = _ids(index, node)
        if len(ids) > 1 and _array_scored(index, len(ids)):
            return np.ones(len(rows))
        return sum((_term_scores(index, t, rows) for t in ids), np.zeros(len(rows)))
    if isinstance(node, Phrase):
        return sum((_scores(e, index, rows) for e in node.elements), np.zeros(len(rows)))
    if isinstance(node, Not):
        return np.ones(len(rows))
    if isinstance(node, And):
        return sum((_scores(child, index, rows) for child in node.children), np.zeros(len(rows)))
    if isinstance(node, Or):
        total = np.zeros(len(rows))
        for child in node.children:
            matched = np.isin(rows, match_rows(child, index, rows), assume_unique=True)
            total[matched] += _scores(child, index, rows[matched])
        return total
    raise AssertionError(f"unexpected query node {node!r}")


def whoosh_topk(index, node: Node, k: int, universe: np.ndarray | None = None,
                backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """The top-k page rows for a parsed Whoosh query, and their Whoosh scores.

    Args:
        index: the whoosh-compatible `SearchIndex`.
        node: the query, from `parse_whoosh_query` (or `whoosh_bag_of_words`).
        k: at most this many rows.
        universe: sorted rows a result may come from (None: all pages).
        backend: the `kernels.bm25.topk` backend for flat queries.

    Returns:
        (rows int64, scores float64), score descending, ties by ascending row.
    """
    from kernels.bm25 import topk

    if isinstance(node, Empty):
        return np.zeros(0, np.int64), np.zeros(0)
    flat = _flat(node, index)
    if flat is not None:
        tokens, constant = flat
        query_ids = np.array(tokens, dtype=np.int64)
        if universe is None and is_disjunction(node):
            rows, scores = topk(index.matrix, query_ids, k, backend=backend)
        else:
            matching = match_rows(node, index, universe)
            if len(matching) == 0:
                return np.zeros(0, np.int64), np.zeros(0)
            mask = np.zeros(index.num_pages, dtype=bool)
            mask[matching] = True
            rows, scores = topk(index.matrix, query_ids, k, candidates=mask, include_zero=True, backend=backend)
        return rows, scores.astype(np.float64) + constant
    matching = match_rows(node, index, universe)
    scores = _scores(node, index, matching)
    order = np.lexsort((matching, -scores))[:k]
    return matching[order].astype(np.int64), scores[order]
