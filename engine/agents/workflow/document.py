"""The workflow's per-document stage: MADQA's BM25 agent confined to one document, answering one sub-question.

A `DocumentEpisode` is a child episode (`Spawn`) of the workflow agent: the BM25 agent
(engine/agents/bm25.py) with its search restricted to one document and its citations to that
document's id. It answers one filled sub-query template; its dialog (the sub-question, the
answer, the pages) goes to the structuring step (structure.py), which writes the document's
typed record. An episode that does not answer within its turns is retried once with the error
shown; a second failure ends it with `error` set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.agents.actions import Done, Turn
from engine.agents.bm25 import Episode
from engine.agents.protocol import tool_call_schema
from engine.agents.workflow.prompts import EXTRACT_SYSTEM, extract_user, retry_note

__all__ = ["DocumentView", "ExtractionTask", "DocumentEpisode"]


class DocumentView:
    """An agent environment that sees one document: search is restricted to it, pages pass through."""

    def __init__(self, env, document: str):
        self.env, self.document = env, document

    def search(self, query: str, k: int, mode: str | None = None):
        return self.env.search(query, k, mode, document=self.document)

    def page_text(self, document: str, page: int, query: str | None = None) -> str:
        return self.env.page_text(document, page, query)

    def page_image(self, document: str, page: int, dpi: int, max_pixels: int):
        return self.env.page_image(document, page, dpi, max_pixels)

    def with_images(self, hits, dpi: int, max_pixels: int):
        return self.env.with_images(hits, dpi, max_pixels)


@dataclass(slots=True)
class ExtractionTask:
    question: str  # the overall analytical question (the shared beginning of every document's prompt)
    document: str  # the document id
    fields: dict  # the document's metadata
    subquery: str  # the plan's template filled with the document's metadata
    asked: list[str]  # the plan fields this sub-query is for
    template: int  # the template's index in the plan
    page_count: int  # pages of the document


@dataclass
class DocumentEpisode(Episode):
    task: ExtractionTask | None = None
    error: str | None = None  # why this document gave no answer (after the retry)
    failed_stage: str | None = None  # extraction
    retried: set = field(default_factory=set)  # stages already retried once
    pages_seen: list = field(default_factory=list)  # pages the searches returned, in order
    prompt: list = field(default_factory=list)  # the first turn's messages (the prefix-cache report renders them)

    def first_turn(self) -> Turn:
        task, turns = self.task, self.settings.max_iterations
        user = extract_user(task.question, task.document, task.fields, task.subquery, turns)
        self.prompt = [("system", EXTRACT_SYSTEM), ("user", user)]
        return self._turn(list(self.prompt), allow_search=turns > 1)

    def _turn(self, messages, allow_search: bool) -> Turn:
        turn = Episode._turn(self, messages, allow_search)
        if self.settings.structured:
            turn.schema = tool_call_schema(allow_search, [self.task.document])  # cite this document only
        return turn

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        return self._after_extraction(super().on_output(raw, turn, tokens, model_s))

    def on_tool_result(self, result):
        action = super().on_tool_result(result)
        pages = (self.steps[-1].get("tool_result") or {}).get("pages") or []
        self.pages_seen += [p["page"] for p in pages if p["page"] not in self.pages_seen]
        return self._after_extraction(action)

    def _after_extraction(self, action):
        if not isinstance(action, Done):
            return action
        if action.reason == "answered":
            cited = [c.page for c in self.answer.citations if c.document == self.task.document]
            self.pages_seen += [p for p in cited if p not in self.pages_seen]
            return action
        if action.reason in ("max_iterations", "malformed") and "extraction" not in self.retried:
            self.retried.add("extraction")
            self.reason = None
            note = retry_note("search", f"no answer after {self.iterations} turns ({action.reason})")
            return self._turn([(self.settings.message_role, note + " Answer now with the answer tool.")],
                              allow_search=False)
        return self._give_up("extraction", f"no answer ({action.reason})")

    def _give_up(self, stage: str, reason: str) -> Done:
        self.failed_stage, self.error = stage, reason
        return self._finish(f"{stage}_failed")

    def fail(self, reason: str) -> Done:
        return self._give_up("extraction", reason)

    # --- what the parent keeps ---------------------------------------------------------------------
    def dialog(self) -> str:
        """The sub-question and its answer with the pages cited: what the structuring step reads."""
        if not self.answer:
            return f"Q: {self.task.subquery}\nA: (no answer: {self.error})"
        answer = ", ".join(self.answer.answer)
        pages = ", ".join(str(c.page) for c in self.answer.citations) or "none"
        return f"Q: {self.task.subquery}\nA: {answer} (pages {pages})"

    def summary(self) -> dict:
        """This sub-question's part of the workflow trajectory (its steps go into the parent's top-level steps)."""
        return {"document": self.task.document, "template": self.task.template, "subquery": self.task.subquery,
                "fields": self.task.fields, "asked": self.task.asked,
                "answer": self.answer.answer if self.answer else None,
                "citations": [c.to_json() for c in self.answer.citations] if self.answer else [],
                "pages_seen": self.pages_seen, "failed_stage": self.failed_stage, "error": self.error,
                "reason": self.reason, "prompt": [list(m) for m in self.prompt]}
