"""What the agents act on: a corpus's search index and page texts, safe to call from tool threads.

Every failure a model can cause (a query that does not parse, an unknown document) comes
back as an error string for the observation; nothing an agent does raises out of here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools.errors import DossierError
from tools.search.tokenize import analyze

__all__ = ["AgentEnv", "PageHit", "RetryHint", "excerpt"]


@dataclass(slots=True, frozen=True)
class RetryHint:
    """Why a search found nothing: pages per query part, and a shorter query of the same parts that matches."""

    parts: list[tuple[str, int]]  # (part as the model would write it, pages holding it)
    suggestion: str | None  # a query of some of the parts that matches pages; None when none does
    suggestion_pages: int  # pages the suggestion matches


@dataclass(slots=True, frozen=True)
class PageHit:
    document: str
    page: int
    score: float
    text: str  # the page text, cut to an excerpt around the matched words
    image: object | None = None  # the rendered page (PIL image) when the agent observes images


def excerpt(text: str, words: set[str], max_chars: int) -> str:
    """The page text, or when longer than `max_chars` the window of that size holding the most matched words."""
    text = text.strip()
    if len(text) <= max_chars:
        return text
    spots = [t.start for t in analyze(text) if t.text in words]
    if not spots:
        return text[:max_chars].rstrip() + " …"
    best_start, best = 0, -1
    for spot in spots:
        start = max(0, min(spot - max_chars // 4, len(text) - max_chars))
        count = sum(1 for s in spots if start <= s < start + max_chars)
        if count > best:
            best_start, best = start, count
    piece = text[best_start:best_start + max_chars].strip()
    return ("… " if best_start > 0 else "") + piece + (" …" if best_start + max_chars < len(text) else "")


class AgentEnv:
    """Search and page access for agents over one corpus directory.

    Args:
        corpus: the corpus directory (ingested and indexed).
        page_chars: characters of text shown per page.
        search_mode: "boolean" (MADQA's query language) or "bag" (free text).
        rerank: "none", or "late" to rerank BM25's candidates by late interaction (HEAVEN).
        late_model: the late-interaction model whose embeddings `dossier index --late` built.
    """

    def __init__(self, corpus: str | Path, page_chars: int = 1500, search_mode: str = "boolean",
                 rerank: str = "none", late_model: str = "minilm"):
        from tools.search import Searcher

        self.searcher = Searcher(corpus)
        self.reranker = None
        if rerank == "late":
            from tools.late import LateReranker

            self.reranker = LateReranker.open(corpus, late_model)
        self.store = self.searcher.store
        self.page_chars = page_chars
        self.search_mode = search_mode
        self.documents = [d.id for d in self.store.documents()]
        self._perception = None

    @property
    def perception(self):
        """Q-Guide's five recovery tools over this corpus (created on first use; OCR backend on demand)."""
        if self._perception is None:
            from tools.perception import PerceptionToolkit

            self._perception = PerceptionToolkit(self.store, ocr="auto")
        return self._perception

    def search(self, query: str, k: int, mode: str | None = None,
               document: str | None = None) -> tuple[list[PageHit], str | None]:
        """Top-k pages for a query, and an error message instead when the query is unusable.

        Args:
            mode: "boolean" or "bag"; None uses the environment's search mode.
            document: search only this document (the workflow agent's per-document extraction).
        """
        mode = mode or self.search_mode
        try:
            node = self.searcher.parse(query, mode)
            if self.reranker is not None:
                from tools.late import late_search_hits

                hits = late_search_hits(self.searcher, self.reranker, query, k, mode=mode, document=document,
                                        snippets=False)
            else:
                hits = self.searcher.search(query, k=k, document=document, mode=mode, snippets=False)
        except DossierError as err:
            return [], str(err)
        words = self._words(node)
        return [PageHit(h.document, h.page, h.score, excerpt(self.store.page(h.document, h.page).text, words,
                                                              self.page_chars)) for h in hits], None

    def query_words(self, query: str, mode: str | None = None) -> set[str]:
        """The indexed words that rank a query's hits (not those under NOT), to highlight them; empty if it does not parse."""
        try:
            return self._words(self.searcher.parse(query, mode or self.search_mode))
        except DossierError:
            return set()

    def _words(self, node) -> set[str]:
        from tools.search.searcher import positive_tokens

        return {str(self.searcher.index.vocab[t]) for t in positive_tokens(node, self.searcher.index)}

    def retry_hint(self, query: str, mode: str | None = None) -> RetryHint | None:
        """Why a query matched no page, for the guided loop's retry hint; None when it cannot say.

        Counts the pages holding each AND-ed part of the query (parts under NOT and words that
        analyse to nothing are left out), and finds a shorter query of the same parts that does
        match: the parts some page holds, else all but one of them, else two, else one, choosing
        the one matching the fewest pages (the most specific). A weak model that searched three
        words no page holds together can copy it.
        """
        from itertools import combinations

        from tools.search.query import And, Empty, Not
        from tools.search.searcher import match_rows

        try:
            node = self.searcher.parse(query, mode or self.search_mode)
        except DossierError:
            return None
        parts = [p for p in (node.children if isinstance(node, And) else (node,)) if not isinstance(p, (Not, Empty))]
        if not parts:
            return None
        index = self.searcher.index
        counts = [(_describe(p), int(len(match_rows(p, index)))) for p in parts]
        found = [p for p, (_, n) in zip(parts, counts) if n]
        for size in dict.fromkeys((len(found), len(found) - 1, 2, 1)):
            if not 1 <= size < len(parts):
                continue
            matches = [(int(len(match_rows(And(tuple(c)), index))), c) for c in combinations(found, size)]
            matches = [(n, c) for n, c in matches if n]
            if matches:
                n, best = min(matches, key=lambda m: m[0])
                return RetryHint(counts, " ".join(_describe(p) for p in best), n)
        return RetryHint(counts, None, 0)

    def page_image(self, document: str, page: int, dpi: int, max_pixels: int):
        """A page rendered by the corpus store (cached as PNG in the corpus) as a PIL RGB image."""
        from tools.corpus import RenderSettings

        return self.store.render(document, page, RenderSettings(dpi=dpi, max_pixels=max_pixels))

    def with_images(self, hits: list[PageHit], dpi: int, max_pixels: int) -> list[PageHit]:
        """The hits with their rendered page images attached."""
        from dataclasses import replace

        return [replace(h, image=self.page_image(h.document, h.page, dpi, max_pixels)) for h in hits]

    def page_text(self, document: str, page: int, query: str | None = None) -> str:
        """A page's text cut to `page_chars` (around the query's words when given)."""
        text = self.store.page(document, page).text
        words = {t.text for t in analyze(query)} if query else set()
        return excerpt(text, words, self.page_chars)


def _describe(node) -> str:
    """A query part as the model would write it: word, wildcard, "phrase", (a OR b)."""
    from tools.search.query import Or, Phrase, Term

    if isinstance(node, Term):
        return node.token
    if isinstance(node, Phrase):
        words = " ".join(_describe(e) for e in node.elements)
        return f'"{words}"' + (f"~{node.slop}" if node.slop else "")
    if isinstance(node, Or):
        return "(" + " OR ".join(_describe(c) for c in node.children) + ")"
    return getattr(node, "pattern", str(node))
