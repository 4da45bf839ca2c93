"""The workflow's per-document stage: MADQA's BM25 agent confined to one document, then one record.

A `DocumentEpisode` is a child episode (`Spawn`) of the workflow agent. It is the BM25 agent
(engine/agents/bm25.py) with its search restricted to one document and its citations to that
document's id; once it answers, the same conversation is asked for the fact as a record
(workflow_records.record_schema), which Dossier converts to the plan's target unit. Each stage
that fails (no answer within the turns, a record that does not parse or convert) is retried
once with the error shown; a second failure ends the episode with `error` set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.agents.actions import Done, Turn
from engine.agents.bm25 import Episode
from engine.agents.protocol import tool_call_schema
from engine.agents.workflow.prompts import EXTRACT_SYSTEM, extract_user, record_request, retry_note
from engine.agents.workflow.records import normalise, parse_record, record_schema
from tools.errors import DossierError

__all__ = ["DocumentView", "ExtractionTask", "DocumentEpisode"]

RECORD_TOKENS = 48  # a record is ~25 tokens of JSON


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
    fact: str  # what to extract ("revenue")
    target: str  # the unit records are converted to ("USD million")
    page_count: int  # pages of the document (bounds the record's page when no search returned one)


@dataclass
class DocumentEpisode(Episode):
    task: ExtractionTask | None = None
    phase: str = "extract"  # extract -> record -> done
    record: dict | None = None  # the record as the model wrote it (parsed)
    normalised: dict | None = None  # {"value", "unit", "raw"} in the target unit
    error: str | None = None  # why this document yielded no record (after the retry)
    failed_stage: str | None = None  # extraction | normalisation
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

    # --- extraction (the BM25 loop), then the record -----------------------------------------------
    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        if self.phase == "record":
            return self._on_record(raw, tokens, model_s)
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
            self.phase = "record"
            cited = [c.page for c in self.answer.citations if c.document == self.task.document]
            self.pages_seen += [p for p in cited if p not in self.pages_seen]
            return self._record_turn(record_request(self.task.fact, self.task.target))
        if action.reason in ("max_iterations", "malformed") and "extraction" not in self.retried:
            self.retried.add("extraction")
            note = retry_note("search", f"no answer after {self.iterations} turns ({action.reason})")
            return self._turn([(self.settings.message_role, note + " Answer now with the answer tool.")],
                              allow_search=False)
        return self._give_up("extraction", f"no answer ({action.reason})")

    def _record_turn(self, text: str) -> Turn:
        turn = Episode._turn(self, [(self.settings.message_role, text)], allow_search=False)
        turn.schema = record_schema(self.pages_seen, self.task.page_count)
        turn.max_new_tokens = RECORD_TOKENS
        return turn

    def _on_record(self, raw: str, tokens: dict, model_s: float):
        step = {"step": self.iterations + 1, "input_delta": self._input_delta, "raw_output": raw, "tool_call": None,
                "tool_result": None, "tokens": tokens, "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}}
        self.steps.append(step)
        try:
            record = parse_record(raw)
            step["tool_call"] = {"name": "record", "arguments": record}
            normalised = normalise(record, self.task.target)
        except DossierError as err:
            step["tool_result"] = {"error": str(err)}
            if "normalisation" in self.retried:
                return self._give_up("normalisation", str(err))
            self.retried.add("normalisation")
            return self._record_turn(retry_note("record", str(err)))
        step["tool_result"] = {"normalised": {"value": normalised["value"], "unit": normalised["unit"]}}
        self.record, self.normalised = record, normalised
        self.phase = "done"
        return self._finish("answered")

    def _give_up(self, stage: str, reason: str) -> Done:
        self.failed_stage, self.error, self.phase = stage, reason, "done"
        return self._finish(f"{stage}_failed")

    def fail(self, reason: str) -> Done:
        return self._give_up("normalisation" if self.phase == "record" else "extraction", reason)

    # --- what the parent keeps ---------------------------------------------------------------------
    def dialog(self) -> str:
        """The document's dialog for MuDABench's coverage judge: the sub-question, the answer, the record."""
        answer = ", ".join(self.answer.answer) if self.answer else "(no answer)"
        lines = [f"Q: {self.task.subquery}", f"A: {answer}"]
        if self.normalised is not None:
            raw = self.record
            lines.append(f"Record: {self.normalised['value']:g} {self.normalised['unit']} (printed {raw['value']} "
                         f"{raw['scale']} {raw['unit']}, page {raw['page']})")
        elif self.error:
            lines.append(f"Error: {self.error}")
        return "\n".join(lines)

    def summary(self) -> dict:
        """This document's part of the workflow trajectory (its steps go into the parent's top-level steps)."""
        return {"document": self.task.document, "subquery": self.task.subquery, "fields": self.task.fields,
                "answer": self.answer.answer if self.answer else None,
                "citations": [c.to_json() for c in self.answer.citations] if self.answer else [],
                "record": self.record, "normalised": self.normalised, "pages_seen": self.pages_seen,
                "failed_stage": self.failed_stage, "error": self.error, "reason": self.reason,
                "prompt": [list(m) for m in self.prompt]}
