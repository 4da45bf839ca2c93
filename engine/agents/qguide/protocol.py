"""Q-Guide's turn formats: JSON schemas for constrained decoding, and parsers that never raise.

A policy turn is one JSON object, "tool" first (the flat shape small models follow best):
    {"tool": "perceive", "calls": [{"name": "text_recovery", "arguments": {...}}, ...]}
    {"tool": "submit", "answer": ["..."], "citations": [{"document", "page"}], "reasoning": "...",
     "confidence": "low|med|high"}
`perceive` is one round: its calls (1..MAX_CALLS, any of the offered tools) run concurrently and
count as one round. The forced turn at T_max admits only `submit`. The verification turn is
{"supported": bool, "observation": n} (n = the observation that states the answer, 0 for none);
the arbitration turn is {"choice": n}; a targeted lookup's reader turn is {"answer": "...",
"confidence": "low|med|high"} (the paper's lookup "returns a short answer with confidence").
The submission's `reasoning` is the paper's "short reasoning" (at most MAX_REASONING_CHARS).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

from engine.agents.protocol import MAX_ANSWER_CHARS, MAX_ITEMS, Malformed, answer_spec, parse_citations
from engine.datasets.formats import Evidence
from tools.schema import ToolSpec

__all__ = ["LEVELS", "MAX_CALLS", "MAX_REASONING_CHARS", "ROUND_TOKENS", "PerceiveCall", "SubmitCall", "citation_schema", "round_schema", "submit_schema", "verify_schema",
           "choice_schema", "lookup_schema", "parse_turn", "parse_verdict", "parse_choice", "parse_lookup"]

LEVELS = ("low", "med", "high")  # the confidence levels, in order
MAX_CALLS = 4  # tool calls one round may make
# Tokens a free round may generate at least: four lookup calls with regions and 160-character questions
# measured ~400 tokens with SmolLM2's and Qwen2.5's tokenizers, over the agents' usual 256-token turn.
ROUND_TOKENS = 480
MAX_REASONING_CHARS = 240  # the submission's short reasoning: a sentence or two (~60 tokens)


@dataclass(slots=True, frozen=True)
class PerceiveCall:
    """One round of tool calls."""

    calls: list[tuple[str, dict]]  # (tool name, arguments), in the order the model wrote them

    def to_json(self) -> dict:
        return {"name": "perceive", "arguments": {"calls": [{"name": n, "arguments": a} for n, a in self.calls]}}


@dataclass(slots=True, frozen=True)
class SubmitCall:
    answer: list[str]
    citations: list[Evidence] = field(default_factory=list)
    confidence: str = "low"
    reasoning: str = ""  # the policy's short reasoning ("" when it wrote none)

    def to_json(self) -> dict:
        return {"name": "submit", "arguments": {"answer": self.answer, "citations": [c.to_json() for c in self.citations],
                                                "reasoning": self.reasoning, "confidence": self.confidence}}


def citation_schema(page_counts: dict[str, int]) -> dict:
    """One citation whose page lies within its document: 1..page count of the document it names.

    Documents with the same page count share one alternative, so the grammar grows with the number
    of distinct page counts, not with the number of documents.
    """
    by_count: dict[int, list[str]] = {}
    for document, count in page_counts.items():
        by_count.setdefault(max(int(count), 1), []).append(document)
    options = [{"type": "object",
                "properties": {"document": {"type": "string", "enum": sorted(documents)},
                               "page": {"type": "integer", "minimum": 1, "maximum": count}},
                "required": ["document", "page"], "additionalProperties": False}
               for count, documents in sorted(by_count.items())]
    return options[0] if len(options) == 1 else {"anyOf": options}


def submit_schema(documents: list[str] | None = None, page_counts: dict[str, int] | None = None) -> dict:
    """The submission: the BM25 agent's answer and citations, plus a confidence level.

    Args:
        documents: the document ids citations may name (None: any id).
        page_counts: pages of each of those documents; a citation's page is then bounded by its
            document's page count (a 1-page poster can only be cited at page 1).
    """
    params = copy.deepcopy(answer_spec(documents).parameters)
    if documents and page_counts:
        params["properties"]["citations"]["items"] = citation_schema({d: page_counts[d] for d in documents})
    return {"type": "object",
            "properties": {"tool": {"const": "submit"}, **params["properties"],
                           "reasoning": {"type": "string", "maxLength": MAX_REASONING_CHARS},
                           "confidence": {"type": "string", "enum": list(LEVELS)}},
            "required": ["tool", "answer", "citations", "reasoning", "confidence"], "additionalProperties": False}


def round_schema(specs: list[ToolSpec], documents: list[str] | None = None,
                 page_counts: dict[str, int] | None = None) -> dict:
    """A free turn: one round of calls to the offered tools, or a submission."""
    calls = [spec.call_schema() for spec in specs]
    call = calls[0] if len(calls) == 1 else {"anyOf": calls}
    perceive = {"type": "object",
                "properties": {"tool": {"const": "perceive"},
                               "calls": {"type": "array", "items": call, "minItems": 1, "maxItems": MAX_CALLS}},
                "required": ["tool", "calls"], "additionalProperties": False}
    return {"anyOf": [perceive, submit_schema(documents, page_counts)]}


def verify_schema(observations: int) -> dict:
    return {"type": "object",
            "properties": {"supported": {"type": "boolean"},
                           "observation": {"type": "integer", "minimum": 0, "maximum": max(observations, 0)}},
            "required": ["supported", "observation"], "additionalProperties": False}


def choice_schema(candidates: int) -> dict:
    return {"type": "object", "properties": {"choice": {"type": "integer", "minimum": 1, "maximum": candidates}},
            "required": ["choice"], "additionalProperties": False}


def lookup_schema() -> dict:
    return {"type": "object", "properties": {"answer": {"type": "string", "minLength": 1, "maxLength": MAX_ANSWER_CHARS},
                                             "confidence": {"type": "string", "enum": list(LEVELS)}},
            "required": ["answer", "confidence"], "additionalProperties": False}


def _object(raw: str) -> dict | Malformed:
    text = raw.strip()
    start = text.find("{")
    if start < 0:
        return Malformed("no JSON object found" if text else "the reply was empty")
    try:  # the first complete object; strict=False admits raw control characters inside strings
        obj, _ = json.JSONDecoder(strict=False).raw_decode(text[start:])
    except json.JSONDecodeError as err:
        return Malformed(f"invalid JSON: {err.msg} at character {err.pos}")
    return obj if isinstance(obj, dict) else Malformed("the JSON is not an object")


def parse_turn(raw: str, allow_tools: bool, tool_names: list[str],
               page_counts: dict[str, int] | None = None) -> PerceiveCall | SubmitCall | Malformed:
    """A policy turn as a round of calls or a submission; anything unusable is `Malformed(reason)`.

    A call to a tool that is not offered, or with bad arguments, is kept: running it yields an
    error observation, so the model sees what was wrong (the round still counts). With
    `page_counts`, a citation of a document not listed there or of a page outside 1..its page
    count is dropped (the schema admits none; this holds the same rule for unconstrained models).
    """
    obj = _object(raw)
    if isinstance(obj, Malformed):
        return obj
    tool = obj.get("tool")
    if tool == "perceive":
        if not allow_tools:
            return Malformed("this is the last turn: only submit is allowed")
        calls = obj.get("calls")
        if not isinstance(calls, list) or not calls:
            return Malformed("perceive needs 'calls': a list of {name, arguments}")
        parsed = []
        for call in calls[:MAX_CALLS]:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                return Malformed(f"each call needs a 'name' (one of {', '.join(tool_names)}) and 'arguments'")
            arguments = call.get("arguments")
            parsed.append((call["name"], arguments if isinstance(arguments, dict) else {}))
        return PerceiveCall(parsed)
    if tool == "submit":
        answer = obj.get("answer")
        if isinstance(answer, (str, int, float)):
            answer = [answer]
        if not isinstance(answer, list) or not answer or not all(isinstance(a, (str, int, float)) for a in answer):
            return Malformed("submit needs 'answer' as a list of strings")
        confidence = obj.get("confidence")
        if confidence not in LEVELS:
            return Malformed(f"submit needs 'confidence': one of {', '.join(LEVELS)}")
        citations = parse_citations((obj.get("citations") or [])[:MAX_ITEMS] if isinstance(obj.get("citations"), list)
                                    else None)
        if page_counts is not None:
            citations = [c for c in citations if 1 <= c.page <= page_counts.get(c.document, 0)]
        reasoning = obj.get("reasoning")
        reasoning = reasoning.strip()[:MAX_REASONING_CHARS] if isinstance(reasoning, str) else ""
        return SubmitCall([str(a).strip() for a in answer], citations, confidence, reasoning)
    return Malformed(f"unknown tool {tool!r}; use 'perceive' or 'submit'")


def parse_verdict(raw: str) -> tuple[bool, int] | Malformed:
    obj = _object(raw)
    if isinstance(obj, Malformed):
        return obj
    supported, index = obj.get("supported"), obj.get("observation")
    if not isinstance(supported, bool) or not isinstance(index, int) or isinstance(index, bool):
        return Malformed("the verdict needs 'supported' (true or false) and 'observation' (a number)")
    return supported, index


def parse_choice(raw: str, candidates: int) -> int | Malformed:
    obj = _object(raw)
    if isinstance(obj, Malformed):
        return obj
    choice = obj.get("choice")
    if not isinstance(choice, int) or isinstance(choice, bool) or not 1 <= choice <= candidates:
        return Malformed(f"'choice' must be a number from 1 to {candidates}")
    return choice


def parse_lookup(raw: str) -> tuple[str, str] | Malformed:
    """A lookup reader's reply as (answer, confidence)."""
    obj = _object(raw)
    if isinstance(obj, Malformed):
        return obj
    answer = obj.get("answer")
    if not isinstance(answer, (str, int, float)) or not str(answer).strip():
        return Malformed("the lookup reply needs a non-empty 'answer'")
    confidence = obj.get("confidence")
    if confidence not in LEVELS:
        return Malformed(f"the lookup reply needs 'confidence': one of {', '.join(LEVELS)} (got {confidence!r})")
    return str(answer).strip(), confidence
