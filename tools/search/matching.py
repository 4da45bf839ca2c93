"""Boolean matching of a parsed query over the positional index, and the words that rank it.

Shared by both retrievers: `match_rows` is the exact set of pages a query matches (terms,
wildcards, phrases with slop, AND / OR / NOT), whatever scores them afterwards.
"""

from __future__ import annotations

import numpy as np

from tools.search.query import And, Empty, Node, Not, Or, Phrase, Term, Wildcard

__all__ = ["match_rows", "is_disjunction", "positive_tokens"]


def _ids(index, element: Term | Wildcard) -> list[int]:
    if isinstance(element, Term):
        token = index.token_id(element.token)
        return [] if token is None else [token]
    return index.expand(element)


def _within(rows: np.ndarray, universe: np.ndarray | None) -> np.ndarray:
    return rows if universe is None else np.intersect1d(rows, universe, assume_unique=True)


def match_rows(node: Node, index, universe: np.ndarray | None = None) -> np.ndarray:
    """Sorted page rows matching the query AST, within the sorted `universe` (None: every page)."""
    pos = index.positions
    if isinstance(node, Empty):
        return np.arange(index.num_pages, dtype=np.int32) if universe is None else universe
    if isinstance(node, (Term, Wildcard)):
        return _within(pos.pages_any(_ids(index, node)), universe)
    if isinstance(node, Phrase):
        elements = [_ids(index, e) for e in node.elements]
        if any(not ids for ids in elements):
            return np.zeros(0, np.int32)
        rows = universe
        for ids in elements:
            rows = _within(pos.pages_any(ids), rows)
        return pos.phrase_pages(elements, node.slop, rows)
    if isinstance(node, And):
        rows = universe
        for child in node.children:  # positives first, each inside the running intersection
            if not isinstance(child, Not):
                rows = match_rows(child, index, rows)
        for child in node.children:
            if isinstance(child, Not):
                rows = match_rows(child, index, rows)
        return rows
    if isinstance(node, Or):
        parts = [match_rows(child, index, universe) for child in node.children]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int32)
    if isinstance(node, Not):
        everything = np.arange(index.num_pages, dtype=np.int32) if universe is None else universe
        return np.setdiff1d(everything, match_rows(node.child, index, universe), assume_unique=True)
    raise AssertionError(f"unknown query node {node!r}")


def is_disjunction(node: Node) -> bool:
    """True for a word, a wildcard, or an OR of them: every page holding a query word matches."""
    if isinstance(node, (Term, Wildcard)):
        return True
    return isinstance(node, Or) and all(isinstance(c, (Term, Wildcard)) for c in node.children)


def positive_tokens(node: Node, index, negated: bool = False) -> list[int]:
    """Token ids of the words that rank results: those not under NOT (wildcards expanded)."""
    if isinstance(node, Not):
        return positive_tokens(node.child, index, not negated)
    if negated or isinstance(node, Empty):
        return []
    if isinstance(node, (Term, Wildcard)):
        return _ids(index, node)
    if isinstance(node, Phrase):
        return [t for e in node.elements for t in _ids(index, e)]
    out: list[int] = []
    for child in node.children:  # And / Or
        out.extend(positive_tokens(child, index, negated))
    return list(dict.fromkeys(out))
