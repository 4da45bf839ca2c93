"""Search a corpus: Boolean matching over the positional index, BM25 ranking, snippets.

    searcher = Searcher("corpus/")
    hits = searcher.search('"capital expenditure" 2018', k=5)
    hits[0].document, hits[0].page, hits[0].score, hits[0].snippet

Thread-safe for concurrent searches (agents call it from a thread pool).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.errors import DossierError
from tools.search.index import SearchIndex
from tools.search.query import And, Empty, Node, Not, Or, Phrase, Term, Wildcard, bag_of_words, parse_query
from tools.search.tokenize import analyze

__all__ = ["SearchHit", "Searcher", "match_rows"]

SNIPPET_TOKENS = 32  # words of context in a snippet
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\u00ad]")  # format characters


@dataclass(slots=True, frozen=True)
class SearchHit:
    document: str
    page: int  # 1-indexed
    score: float  # BM25 score over the query's positive words (0 for pages matched only by filters)
    snippet: str  # page text around the best cluster of matched words, matches marked **like this**

    def to_json(self) -> dict:
        return {"document": self.document, "page": self.page, "score": round(float(self.score), 6),
                "snippet": self.snippet}


def _ids(index: SearchIndex, element: Term | Wildcard) -> list[int]:
    if isinstance(element, Term):
        token = index.token_id(element.token)
        return [] if token is None else [token]
    return index.expand(element)


def match_rows(node: Node, index: SearchIndex, universe: np.ndarray) -> np.ndarray:
    """Sorted page rows (within the sorted `universe`) matching the query AST."""
    pos = index.positions
    if isinstance(node, Empty):
        return universe
    if isinstance(node, (Term, Wildcard)):
        return np.intersect1d(pos.pages_any(_ids(index, node)), universe, assume_unique=True)
    if isinstance(node, Phrase):
        elements = [_ids(index, e) for e in node.elements]
        if any(not ids for ids in elements):
            return np.zeros(0, np.int32)
        rows = universe
        for ids in elements:
            rows = np.intersect1d(rows, pos.pages_any(ids), assume_unique=True)
        return pos.phrase_pages(elements, node.slop, rows)
    if isinstance(node, And):
        positive = [c for c in node.children if not isinstance(c, Not)]
        rows = universe
        for child in positive:  # each child is evaluated inside the running intersection
            rows = match_rows(child, index, rows)
        for child in node.children:
            if isinstance(child, Not):
                rows = np.setdiff1d(rows, match_rows(child.child, index, rows), assume_unique=True)
        return rows
    if isinstance(node, Or):
        parts = [match_rows(child, index, universe) for child in node.children]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int32)
    if isinstance(node, Not):
        return np.setdiff1d(universe, match_rows(node.child, index, universe), assume_unique=True)
    raise AssertionError(f"unknown query node {node!r}")


def positive_tokens(node: Node, index: SearchIndex, negated: bool = False) -> list[int]:
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


class Searcher:
    """BM25 search over a corpus store's index, with Whoosh-style queries.

    Args:
        corpus: the corpus directory (built by `dossier ingest` and `dossier index`).
        backend: BM25 top-k kernel ("auto", "reference", "numba", "triton").
    """

    def __init__(self, corpus: str | Path, backend: str = "auto"):
        from tools.corpus import CorpusStore

        self.store = CorpusStore(corpus)
        self.index = SearchIndex.load(corpus)
        self.backend = backend
        self._all_rows = np.arange(self.index.num_pages, dtype=np.int32)

    @property
    def stale(self) -> bool:
        return self.index.is_stale(self.store)

    def parse(self, query: str, mode: str = "boolean") -> Node:
        """Parse a query: "boolean" (the query language) or "bag" (free text, words OR-ed)."""
        if mode == "boolean":
            return parse_query(query)
        if mode == "bag":
            return bag_of_words(query)
        raise DossierError(f"unknown search mode {mode!r}; use 'boolean' or 'bag'")

    def universe(self, document: str | None) -> np.ndarray:
        if document is None:
            return self._all_rows
        if document not in self.index.doc_rows:
            self.store.document(document)  # raises "unknown document" with suggestions
            raise DossierError(f"document {document!r} is not in the index; rebuild it with `dossier index`")
        lo, hi = self.index.doc_rows[document]
        return self._all_rows[lo:hi]

    def search(self, query: str, k: int = 5, document: str | None = None, mode: str = "boolean",
               snippets: bool = True) -> list[SearchHit]:
        """The top-k pages for a query.

        Args:
            query: Whoosh-style query (see tools/search/query.py), or free text with mode="bag".
            k: number of pages to return.
            document: restrict to one document id.
            mode: "boolean" or "bag".
            snippets: compute snippets (costs one page read per hit).

        Raises:
            QuerySyntaxError: the query does not parse (message shows where).
            DossierError: unknown document, or k < 1.
        """
        from kernels.bm25 import topk

        if k < 1:
            raise DossierError(f"k must be at least 1, got {k}")
        node = self.parse(query, mode)
        if isinstance(node, Empty):
            return []
        rows = match_rows(node, self.index, self.universe(document))
        if len(rows) == 0:
            return []
        mask = np.zeros(self.index.num_pages, dtype=bool)
        mask[rows] = True
        positive = np.array(positive_tokens(node, self.index), dtype=np.int64)
        ids, scores = topk(self.index.matrix, positive, k, candidates=mask, include_zero=True, backend=self.backend)
        words = {str(self.index.vocab[t]) for t in positive}
        hits = []
        for row, score in zip(ids.tolist(), scores.tolist()):
            doc, page = self.index.page_rows[row]
            snippet = make_snippet(self.store.page(doc, page).text, words) if snippets else ""
            hits.append(SearchHit(doc, page, score, snippet))
        return hits


def make_snippet(text: str, words: set[str], width: int = SNIPPET_TOKENS) -> str:
    """The window of `width` tokens holding the most distinct matched words, matches in **bold**."""
    toks = list(analyze(text, keep_stopwords=True))
    if not toks:
        return ""
    hits = [i for i, t in enumerate(toks) if t.text in words]
    best, best_score = 0, -1
    for i in hits or [0]:
        start = max(0, i - width // 4)
        score = len({toks[j].text for j in hits if start <= j < start + width})
        if score > best_score:
            best, best_score = start, score
    window = toks[best:best + width]
    lo, hi = window[0].start, window[-1].end
    pieces, cursor = [], lo
    for t in window:
        if t.text in words:
            pieces += [text[cursor:t.start], "**", text[t.start:t.end], "**"]
            cursor = t.end
    pieces.append(text[cursor:hi])
    snippet = _INVISIBLE.sub("", re.sub(r"\s+", " ", "".join(pieces))).strip()
    return ("… " if lo > 0 else "") + snippet + (" …" if hi < len(text.rstrip()) else "")
