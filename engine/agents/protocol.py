"""The agents' tool-call protocol: JSON schemas for constrained decoding, and a parser that never raises.

A model turn is one JSON object:
    {"tool": "search", "query": "..."}
    {"tool": "answer", "answer": ["..."], "citations": [{"document": "...", "page": 3}]}
With structured output the engine makes every turn match the schema; without it (or
when a turn is cut off by the token limit) `parse_tool_call` returns a `Malformed`
describing what is wrong, which the episode feeds back to the model as an observation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from engine.datasets.formats import Evidence
from tools.schema import ToolSpec

__all__ = ["SearchCall", "AnswerCall", "Malformed", "search_spec", "answer_spec", "tool_call_schema", "parse_tool_call",
           "parse_citations", "MAX_QUERY_CHARS"]

# Bounds in the schema keep a weak model from looping inside a string or a list until the
# token limit cuts the call off (SmolLM2 repeats list items endlessly without them).
MAX_QUERY_CHARS = 100
MAX_ANSWER_CHARS = 100
MAX_ITEMS = 5


@dataclass(slots=True, frozen=True)
class SearchCall:
    query: str

    def to_json(self) -> dict:
        return {"name": "search", "arguments": {"query": self.query}}


@dataclass(slots=True, frozen=True)
class AnswerCall:
    answer: list[str]
    citations: list[Evidence] = field(default_factory=list)
    truncated: bool = False  # cut off by the token limit after the answer list; the complete citations kept

    def to_json(self) -> dict:
        return {"name": "answer", "arguments": {"answer": self.answer, "citations": [c.to_json() for c in self.citations]}}


@dataclass(slots=True, frozen=True)
class Malformed:
    reason: str  # what is wrong, shown to the model


def search_spec() -> ToolSpec:
    """The BM25 agent's search tool (MADQA's: the query language of `dossier search`)."""
    return ToolSpec(
        "search",
        "Search every page of the collection with BM25; returns the best pages, each labelled "
        "'File: <document>, Page: <n>'. Keywords are AND-ed; OR, NOT, \"phrases\" and wildcards work.",
        {"type": "object",
         "properties": {"query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}},
         "required": ["query"], "additionalProperties": False},
    )


def answer_spec(documents: list[str] | None = None) -> ToolSpec:
    """The final-answer tool; with `documents`, citations may only name those document ids."""
    document = {"type": "string", "enum": sorted(documents)} if documents else {"type": "string", "minLength": 1}
    return ToolSpec(
        "answer",
        "Give the final answer as a list of short strings copied from the documents, with the pages used.",
        {"type": "object",
         "properties": {
             "answer": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": MAX_ANSWER_CHARS},
                        "minItems": 1, "maxItems": MAX_ITEMS},
             "citations": {"type": "array", "maxItems": MAX_ITEMS, "items": {
                 "type": "object",
                 "properties": {"document": document, "page": {"type": "integer", "minimum": 1, "maximum": 100000}},
                 "required": ["document", "page"], "additionalProperties": False}}},
         "required": ["answer", "citations"], "additionalProperties": False},
    )


def _flat(spec: ToolSpec) -> dict:
    """A call as one flat object, "tool" first: {"tool": name, <arguments>} (easiest for small models)."""
    params = spec.parameters
    return {"type": "object", "properties": {"tool": {"const": spec.name}, **params["properties"]},
            "required": ["tool", *params.get("required", [])], "additionalProperties": False}


def tool_call_schema(allow_search: bool, documents: list[str] | None = None) -> dict:
    """JSON schema of one turn: search or answer, or (forced final turn) answer only.

    Args:
        allow_search: False on the last iteration, when the model must answer.
        documents: when given, citations may only name these document ids.
    """
    answer = _flat(answer_spec(documents))
    return {"anyOf": [_flat(search_spec()), answer]} if allow_search else answer


def parse_tool_call(raw: str, allow_search: bool = True) -> SearchCall | AnswerCall | Malformed:
    """Parse a model turn into a tool call; anything unusable becomes `Malformed(reason)`."""
    text = raw.strip()
    if not text:
        return Malformed("the reply was empty")
    start = text.find("{")
    if start < 0:
        return Malformed("no JSON object found")
    truncated = False
    try:
        # the first complete object, trailing text ignored; strict=False admits raw control characters in
        # strings, which xgrammar's length-bounded string rule lets through
        obj, _end = json.JSONDecoder(strict=False).raw_decode(text[start:])
    except json.JSONDecodeError as err:
        obj = _cut_answer(text[start:])
        if obj is None:
            return Malformed(f"invalid JSON: {err.msg} at character {err.pos}")
        truncated = True
    if not isinstance(obj, dict):
        return Malformed("the JSON is not an object")
    tool = obj.get("tool", obj.get("name"))
    args = obj.get("arguments", obj) if isinstance(obj.get("arguments"), dict) else obj
    if tool == "search":
        if not allow_search:
            return Malformed("this is the last turn: only the answer tool is allowed")
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return Malformed("search needs a non-empty string 'query'")
        return SearchCall(query.strip()[:MAX_QUERY_CHARS])
    if tool == "answer":
        answer = args.get("answer")
        if isinstance(answer, str):
            answer = [answer]
        if not isinstance(answer, list) or not answer or not all(isinstance(a, (str, int, float)) for a in answer):
            return Malformed("answer needs 'answer' as a list of strings")
        return AnswerCall([str(a).strip() for a in answer], parse_citations(args.get("citations")), truncated)
    return Malformed(f"unknown tool {tool!r}; use 'search' or 'answer'")


def parse_citations(items) -> list[Evidence]:
    """The well-formed citations of a call, each once, in order; a bad one costs itself, not the answer."""
    citations = []
    for item in items if isinstance(items, list) else []:
        try:
            citations.append(Evidence.from_json(item, "citation"))
        except Exception:
            continue
    return list(dict.fromkeys(citations))


def _cut_answer(text: str) -> dict | None:
    """An answer call cut off by the token limit inside its citations, closed at its last complete value.

    The schema orders "answer" before "citations", so once the "citations" key is present the
    answer list is complete: the answer and the citations finished before the cut are kept (a
    weak model repeating citations until the limit otherwise loses a finished answer). Anything
    cut earlier stays malformed.
    """
    closers = {"{": "}", "[": "]"}
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (end of a complete value, closing brackets needed there)
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                cuts.append((i + 1, "".join(closers[b] for b in reversed(stack))))
        elif ch == '"':
            in_string = True
        elif ch in closers:
            stack.append(ch)
        elif ch in "}]":
            if not stack:
                return None
            stack.pop()
            if not stack:
                return None  # a complete object: not a cut-off one (the caller's decode failed elsewhere)
            cuts.append((i + 1, "".join(closers[b] for b in reversed(stack))))
    for end, closing in reversed(cuts[-64:]):
        try:
            obj = json.loads(text[:end] + closing, strict=False)
        except json.JSONDecodeError:
            continue  # e.g. cut after a key, before its value
        if isinstance(obj, dict) and obj.get("tool") == "answer" and "citations" in obj:
            return obj
        return None
    return None
