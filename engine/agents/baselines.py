"""The one-shot baselines: each reads what it is given and answers in one turn (no search).

    rag          one retrieval with the question as free text, then a forced answer
    oracle       the gold evidence pages given directly, then a forced answer (no retrieval)
    closed-book  the question alone, then a forced answer (guessability)

They share the BM25 agent's records and turns (`bm25.Episode`); each only says which pages it
reads. A malformed answer ends the episode: there is no second turn to repair it in.
"""

from __future__ import annotations

from engine.agents import prompts
from engine.agents.actions import Turn
from engine.agents.bm25 import Episode

__all__ = ["ReaderEpisode", "RagEpisode", "OracleEpisode", "ClosedBookEpisode"]


class ReaderEpisode(Episode):
    """Pages (from `pages()`) and the question in one turn; the model must answer."""

    retries_malformed = False

    def pages(self) -> list[tuple[str, int]]:
        """(document, page) to show, in order."""
        raise NotImplementedError

    def first_turn(self) -> Turn:
        s, q = self.settings, self.question
        pages = self.pages()
        question = prompts.format_question(q.question)
        if not pages:
            user = f"(no pages)\n\n{question}"
        elif self.images:
            user = prompts.format_hit_images(None, [(d, p, self._image(d, p)) for d, p in pages]) + [f"\n{question}"]
        else:
            texts = [(d, p, self.env.page_text(d, p, q.question)) for d, p in pages]
            user = f"{prompts.format_hits(None, texts)}\n\n{question}"
        return self._turn([("system", s.system_prompt or prompts.READER_SYSTEM), ("user", user)], allow_search=False)


class RagEpisode(ReaderEpisode):
    """One retrieval with the question as free text; the step records what it retrieved."""

    def pages(self) -> list[tuple[str, int]]:
        q, k = self.question.question, self.settings.k
        hits, error = self.env.search(q, k, mode="bag")
        self.search_history.append(q)
        self._retrieved = {"query": q, "pages": [{"document": h.document, "page": h.page} for h in hits],
                           "error": error}
        return [(h.document, h.page) for h in hits]

    def _note_first_step(self, record: dict) -> None:
        if not self.steps:
            record["retrieved"] = self._retrieved


class OracleEpisode(ReaderEpisode):
    """The gold evidence pages, in gold order (retrieval removed)."""

    def pages(self) -> list[tuple[str, int]]:
        return [(e.document, e.page) for e in self.question.evidence]


class ClosedBookEpisode(ReaderEpisode):
    """The question alone (how guessable the answers are)."""

    def first_turn(self) -> Turn:
        return self._turn([("system", self.settings.system_prompt or prompts.CLOSED_BOOK_SYSTEM),
                           ("user", prompts.format_question(self.question.question))], allow_search=False)
