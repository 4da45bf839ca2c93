"""A targeted lookup's reader: one model turn in a fresh conversation over one region (a child episode).

The round prepared the evidence (`tools.perception.lookup.LookupRequest`: the question, the
region's crop and its text); the same model reads it — the crop as an image for a vision
model, the text for a text-only one — and answers in a few words with a confidence,
constrained to {"answer": "...", "confidence": "low|med|high"}. The reply becomes the call's
observation (content: question, answer, confidence); an unusable reply becomes an error
observation, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.agents.actions import Done, Turn
from engine.agents.protocol import Malformed
from engine.agents.qguide import prompts
from engine.agents.qguide.protocol import lookup_schema, parse_lookup
from engine.datasets.formats import Question
from tools.perception import Observation
from tools.perception.lookup import LookupRequest

__all__ = ["LookupEpisode"]

REPLY_TOKENS = 56  # {"answer": "...", "confidence": "med"} with a short answer


@dataclass
class LookupEpisode:
    question: Question  # the parent's question under a child id (the runner keys sessions and seeds on it)
    request: LookupRequest
    vision: bool
    structured: bool = True  # constrain the reply to {"answer": "..."}
    observation: Observation | None = None
    steps: list[dict] = field(default_factory=list)
    calls: int = 0

    @property
    def iterations(self) -> int:
        return self.calls

    def first_turn(self) -> Turn:
        r = self.request
        text = prompts.lookup_prompt(r.question, r.document, r.page, r.text)
        content = [f"Image of the region of {r.document}, page {r.page}:\n", r.image, "\n" + text] if self.vision else text
        self._delta = f"<system> {prompts.LOOKUP_SYSTEM}\n\n<user> " + (
            f"<image {r.image.width}x{r.image.height}>\n{text}" if self.vision else text)
        return Turn([("system", prompts.LOOKUP_SYSTEM), ("user", content)], allow_search=False, schema=lookup_schema() if self.structured else None,
                    max_new_tokens=REPLY_TOKENS)

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float) -> Done:
        self.calls += 1
        answer = parse_lookup(raw)
        r = self.request
        if isinstance(answer, Malformed):
            self.observation = Observation("targeted_lookup", r.document, r.page, list(r.region), None,
                                           error=f"the reader's reply was not usable: {answer.reason}")
        else:
            self.observation = r.observation(answer[0])
            self.observation.content["confidence"] = answer[1]
        self.steps.append({"step": 1, "role": "lookup", "input_delta": self._delta, "raw_output": raw,
                           "tool_call": {"name": "targeted_lookup_reader", "arguments": {"question": r.question}},
                           "tool_result": self.observation.to_json(images="placeholder"),
                           "tokens": {k: v for k, v in tokens.items() if k != "appended"},
                           "context": {"pages": 0, "observations": 0, "turn": int(sum(tokens.get("appended") or []))},
                           "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}})
        return Done("answered")

    def on_tool_result(self, result):
        raise AssertionError("a lookup reader runs no tools")

    def on_children(self, children):
        raise AssertionError("a lookup reader spawns no children")

    def force_answer(self, note: str) -> Turn:
        return self.first_turn()  # nothing to drop: the reader's turn is all it has

    def fail(self, reason: str) -> Done:
        r = self.request
        self.observation = Observation("targeted_lookup", r.document, r.page, list(r.region), None,
                                       error=f"the reader could not run ({reason})")
        return Done(reason)

    def prediction(self):
        raise AssertionError("a lookup reader is a child episode: its parent writes the records")

    def trajectory(self):
        raise AssertionError("a lookup reader is a child episode: its parent writes the records")
