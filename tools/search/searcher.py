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
from tools.search.matching import is_disjunction, match_rows, positive_tokens
from tools.search.query import Empty, Node, bag_of_words, parse_query
from tools.search.tokenize import analyze

__all__ = ["SearchHit", "Searcher", "match_rows", "positive_tokens", "make_snippet", "snippet_spans"]

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


class Searcher:
    """BM25 search over a corpus store's index, with Whoosh-style queries.

    Args:
        corpus: the corpus directory (built by `dossier ingest` and `dossier index`).
        backend: BM25 top-k kernel ("auto", "reference", "numba", "triton").
        device: "cpu" (numba: touched documents only, fastest one query at a time), or "cuda": the score
            matrix is copied to the GPU once and every search runs the Triton kernels there, when it fits
            (else it stays on the CPU with a warning); "auto": cuda when there is a GPU.
        retriever: "default" (our analyzer, bm25s Lucene k1=1.5), or "whoosh-compatible": MADQA's harness
            search (Whoosh's StandardAnalyzer, QueryParser grouping and BM25F K1=1.2 B=0.75) on our kernels;
            its index is built beside the default one on first use (`tools/search/whoosh_index.py`).
    """

    def __init__(self, corpus: str | Path, backend: str = "auto", device: str = "cpu", retriever: str = "default"):
        from tools.corpus import CorpusStore
        from tools.placement import fits_on_cuda, resolve_device

        self.store = CorpusStore(corpus)
        self.index = SearchIndex.load(corpus, retriever)
        self.retriever = retriever
        self.backend = backend
        self.matrix = self.index.matrix  # a ScoreMatrix (host) or its GpuScoreMatrix copy
        matrix = self.index.matrix
        if resolve_device(device) == "cuda" and fits_on_cuda(_gpu_bytes(matrix), f"the BM25 index of {corpus}"):
            from kernels.bm25_triton import GpuScoreMatrix

            self.matrix = GpuScoreMatrix.from_matrix(matrix, "cuda")

    @property
    def device(self) -> str:
        """Where BM25 is scored: the device of the GpuScoreMatrix copy, else "cpu"."""
        import torch

        data = self.matrix.data
        return data.device.type if isinstance(data, torch.Tensor) else "cpu"

    @property
    def stale(self) -> bool:
        return self.index.is_stale(self.store)

    def parse(self, query: str, mode: str = "boolean") -> Node:
        """Parse a query: "boolean" (the query language) or "bag" (free text, words OR-ed)."""
        if self.retriever == "whoosh-compatible" and mode in ("boolean", "bag"):
            from tools.search.whoosh_query import parse_whoosh_query, whoosh_bag_of_words

            return parse_whoosh_query(query) if mode == "boolean" else whoosh_bag_of_words(query)
        if mode == "boolean":
            return parse_query(query)
        if mode == "bag":
            return bag_of_words(query)
        raise DossierError(f"unknown search mode {mode!r}; use 'boolean' or 'bag'")

    def universe(self, document: str | None) -> np.ndarray | None:
        """Sorted page rows a search may return (None: every page)."""
        if document is None:
            return None
        if document not in self.index.doc_rows:
            self.store.document(document)  # raises "unknown document" with suggestions
            raise DossierError(f"document {document!r} is not in the index; rebuild it with `dossier index`")
        lo, hi = self.index.doc_rows[document]
        return np.arange(lo, hi, dtype=np.int32)

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
        universe = self.universe(document)
        positive = np.array(positive_tokens(node, self.index), dtype=np.int64)
        if self.retriever == "whoosh-compatible":
            from tools.search.whoosh_rank import whoosh_topk

            ids, scores = whoosh_topk(self.index, node, k, universe, backend=self.backend)
            if len(ids) == 0:
                return []
        elif universe is None and is_disjunction(node):
            # every page holding a query word matches: the kernel's own candidate set, no mask
            ids, scores = topk(self.matrix, positive, k, backend=self.backend)
        else:
            rows = match_rows(node, self.index, universe)
            if len(rows) == 0:
                return []
            mask = np.zeros(self.index.num_pages, dtype=bool)
            mask[rows] = True
            ids, scores = topk(self.matrix, positive, k, candidates=mask, include_zero=True, backend=self.backend)
        words = {str(self.index.vocab[t]) for t in positive}
        hits = []
        for row, score in zip(ids.tolist(), scores.tolist()):
            doc, page = self.index.page_rows[row]
            snippet = make_snippet(self.store.page(doc, page).text, words) if snippets else ""
            hits.append(SearchHit(doc, page, score, snippet))
        return hits


def _gpu_bytes(matrix) -> int:
    """Device memory a GpuScoreMatrix copy and one batch of dense score rows (64 queries) take."""
    return len(matrix.data) * 8 + len(matrix.indptr) * 8 + matrix.num_docs * 4 * 64


def snippet_spans(text: str, words: set[str], width: int = SNIPPET_TOKENS) -> list[tuple[str, bool]]:
    """The window of `width` tokens holding the most distinct matched words, as (text, is_match) pieces.

    Whitespace is collapsed and format characters dropped; "… " / " …" mark a cut at either end.
    The pieces keep matches apart from the text around them, so a web page can highlight them
    without parsing markers out of page text (which may itself contain "**").
    """
    toks = list(analyze(text, keep_stopwords=True))
    if not toks:
        return []
    hits = [i for i, t in enumerate(toks) if t.text in words]
    best, best_score = 0, -1
    for i in hits or [0]:
        start = max(0, i - width // 4)
        score = len({toks[j].text for j in hits if start <= j < start + width})
        if score > best_score:
            best, best_score = start, score
    window = toks[best:best + width]
    lo, hi = window[0].start, window[-1].end
    body: list[tuple[str, bool]] = []
    cursor = lo
    for t in window:
        if t.text in words and t.end > cursor:
            start = max(t.start, cursor)  # CJK bigrams overlap their neighbours by one character
            if start == cursor and body and body[-1][1]:
                body[-1] = (body[-1][0] + _clean(text[start:t.end]), True)  # one highlight for a matched run
            else:
                body += [(_clean(text[cursor:start]), False), (_clean(text[start:t.end]), True)]
            cursor = t.end
    body.append((_clean(text[cursor:hi]), False))
    if not body[0][1]:
        body[0] = (body[0][0].lstrip(), False)
    if not body[-1][1]:
        body[-1] = (body[-1][0].rstrip(), False)
    pieces = ([("… ", False)] if lo > 0 else []) + body + ([(" …", False)] if hi < len(text.rstrip()) else [])
    return [(piece, match) for piece, match in pieces if piece]


def _clean(piece: str) -> str:
    return _INVISIBLE.sub("", re.sub(r"\s+", " ", piece))


def make_snippet(text: str, words: set[str], width: int = SNIPPET_TOKENS) -> str:
    """The window of `width` tokens holding the most distinct matched words, matches in **bold**."""
    return "".join(f"**{piece}**" if match else piece for piece, match in snippet_spans(text, words, width))
