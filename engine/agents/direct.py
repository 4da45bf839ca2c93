"""Direct prompting, the single-call baselines Q-Guide compares against (paper 004, Table 1).

One model turn, no tools: the question with the pages of its document, shown as

    visual   page images ("Visual Prompt")
    ocr      page text ("OCR Prompt"): the text the corpus holds for each page (the PDF's text
             layer, or the OCR of a scanned page made at ingest), cut to --page-chars
    both     each page's image followed by its text ("Visual+OCR Prompt")

and the answer in Q-Guide's answer schema (`engine/agents/qguide/protocol.py`'s submit: answer,
citations, a short reasoning, a confidence), so a direct run and a Q-Guide run are scored by
`dossier eval` the same way. There is no gate (the baselines have no verification step): the
answer stands as submitted, and its confidence is recorded.

A question that names its document (DocVQA-2026, `dossier sample --suite qguide`) reads all
its pages; a collection question (no `document`) reads the top --k pages of one BM25 retrieval
with the question, as the `rag` baseline does. A text-only model cannot see images: with
`--inputs visual` each page is then a placeholder saying an image was not shown (the run's
trajectories record `images_shown: false`), which makes that run a closed-book reading; use a
vision model (a Qwen2.5-VL folder) for the paper's visual baselines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.agents.actions import Done, Turn
from engine.agents.protocol import Malformed
from engine.agents.qguide.gate import UNKNOWN
from engine.agents.qguide.loop import content_text
from engine.agents.qguide.protocol import parse_turn, submit_schema
from engine.datasets.formats import Prediction, Question
from tools.errors import DossierError

__all__ = ["INPUTS", "DirectEpisode", "check_settings", "inputs_of"]

INPUTS = ("visual", "ocr", "both")
DEFAULT_INPUTS = "both"  # the strongest of the paper's three direct baselines (38.8 % on DocVQA-2026)

SYSTEM = """\
You answer a question about a document from its pages, each labelled "File: <document>, Page: <n>". \
Reply with one JSON object: {"tool": "submit", "answer": [...], "citations": [{"document": ..., "page": ...}], \
"reasoning": "one short sentence", "confidence": "low" | "med" | "high"}. Answer with as few words as \
possible, copied from the document (a number with its unit, a name, a date); no sentences. Use "high" only \
when a page states the answer. If the document does not contain the answer, answer "Unknown"."""


def inputs_of(settings) -> str:
    """The run's `inputs` setting (visual, ocr or both)."""
    return getattr(settings, "inputs", DEFAULT_INPUTS)


def check_settings(settings) -> None:
    """Raise a DossierError for direct-prompting settings that cannot run (the registry's check)."""
    if inputs_of(settings) not in INPUTS:
        raise DossierError(f"--inputs must be one of {', '.join(INPUTS)} (got {inputs_of(settings)!r})")


@dataclass
class DirectEpisode:
    """One direct-prompting question: one turn, then Done."""

    question: Question
    settings: object
    env: object
    steps: list[dict] = field(default_factory=list)
    pages: list[tuple[str, int]] = field(default_factory=list)
    submission: object = None  # the parsed SubmitCall, or None
    reason: str | None = None
    search_history: list[str] = field(default_factory=list)
    calls: int = 0
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    _delta: str = ""
    _first: Turn | None = None
    _page_counts: dict = field(default_factory=dict)

    @property
    def iterations(self) -> int:
        return self.calls

    @property
    def images_shown(self) -> bool:
        return inputs_of(self.settings) in ("visual", "both") and self.settings.observe == "image"

    def _pages(self) -> list[tuple[str, int]]:
        document = self.question.extra.get("document")
        if document is not None:
            count = self.env.store.document(str(document)).page_count  # a DossierError naming an unknown document
            self._page_counts = {str(document): count}
            return [(str(document), page) for page in range(1, count + 1)]
        hits, error = self.env.search(self.question.question, self.settings.k, mode="bag")
        self.search_history.append(self.question.question)
        if error is not None:
            raise DossierError(f"question {self.question.id}: retrieval failed: {error}")
        self._page_counts = {info.id: info.page_count for info in self.env.store.documents()}
        return [(h.document, h.page) for h in hits]

    def first_turn(self) -> Turn:
        s, inputs = self.settings, inputs_of(self.settings)
        self.pages = self._pages()
        parts: list = []
        for document, page in self.pages:
            parts.append(f"File: {document}, Page: {page}\n")
            if inputs in ("visual", "both"):
                if self.images_shown:
                    parts += [self.env.page_image(document, page, s.image_dpi, s.image_max_pixels), "\n"]
                else:
                    parts.append("(a page image, not shown: this model reads text only)\n")
            if inputs in ("ocr", "both"):
                parts.append(self.env.page_text(document, page, self.question.question).strip() + "\n")
        parts.append(f"\nQuestion: {self.question.question.strip()}")
        content = "".join(parts) if all(isinstance(p, str) for p in parts) else parts
        messages = [("system", s.system_prompt or SYSTEM), (s.message_role, content)]
        self._delta = "\n\n".join(f"<{role}> {content_text(c)}" for role, c in messages)
        documents = sorted(self._page_counts) if self.question.extra.get("document") is not None else (
            self.env.documents if s.cite_known_documents else None)
        schema = submit_schema(documents, self._page_counts if documents else None) if s.structured else None
        self._first = Turn(messages, allow_search=False, schema=schema)
        return self._first

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float) -> Done:
        self.calls += 1
        call = parse_turn(raw, False, [], self._page_counts)
        record = {"step": 1, "role": "direct", "input_delta": self._delta, "raw_output": raw, "tool_call": None,
                  "tool_result": None, "tokens": {k: v for k, v in tokens.items() if k != "appended"},
                  "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}}
        self.steps.append(record)
        if isinstance(call, Malformed):
            record["tool_result"] = {"error": call.reason}
            return self._finish("malformed")
        record["tool_call"] = call.to_json()
        self.submission = call
        return self._finish("answered")

    def _finish(self, reason: str) -> Done:
        self.reason = reason
        self.wall_s = time.perf_counter() - self.started
        return Done(reason)

    def force_answer(self, note: str) -> Turn:
        """Nothing can be dropped from a single turn: the same turn again (the runner then fails the episode
        as context_exhausted; lower --page-chars or use a model with a longer context)."""
        return self._first

    def fail(self, reason: str) -> Done:
        return self._finish(reason)

    def on_tool_result(self, result):
        raise AssertionError("direct prompting runs no tools")

    def on_children(self, children):
        raise AssertionError("direct prompting spawns no children")

    def _record(self) -> dict:
        sub = self.submission
        return {"inputs": inputs_of(self.settings), "images_shown": self.images_shown,
                "pages": [{"document": d, "page": p} for d, p in self.pages],
                "submitted": None if sub is None else sub.answer, "confidence": None if sub is None else sub.confidence,
                "reasoning": None if sub is None else sub.reasoning}

    def prediction(self) -> Prediction:
        totals = {key: sum(int(step["tokens"].get(key, 0)) for step in self.steps)
                  for key in ("prefilled", "cached", "generated")}
        sub = self.submission
        extra = {"agent": "direct", "finish": self.reason, "tokens": totals, "wall_s": round(self.wall_s, 3),
                 "steps": len(self.steps), "inputs": inputs_of(self.settings),
                 "confidence": None if sub is None else sub.confidence}
        return Prediction(self.question.id, self.question.question, sub.answer if sub else [UNKNOWN],
                          list(sub.citations) if sub else [], list(self.search_history), self.calls, extra)

    def trajectory(self) -> dict:
        sub = self.submission
        final = {"answer": sub.answer if sub else None,
                 "citations": [c.to_json() for c in sub.citations] if sub else [], "reason": self.reason}
        return {"id": self.question.id, "question": self.question.question, "agent": "direct", "steps": self.steps,
                "final": final, "direct": self._record()}
