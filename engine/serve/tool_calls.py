"""Tool calls in the Hermes format: tools described in the system message, calls as `<tool_call>` blocks.

The format is the one Qwen2.5's own chat template writes, and it reads well for any
instruction-tuned model:

    <tool_call>
    {"name": "search_documents", "arguments": {"query": "revenue 2023"}}
    </tool_call>

Decoding is constrained with an xgrammar structural tag: the text before a call is free
(`tool_choice="auto"`), at least one call is forced (`"required"`), or exactly the named
function (`{"type": "function", ...}`); inside a call the arguments must match the
function's JSON schema. `parse_tool_calls` turns a finished reply into OpenAI `tool_calls`,
and `ToolCallStream` does the same incrementally for streamed replies.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from engine.core.structured import json_schema_grammar
from engine.serve.protocol import ApiError, ToolDef

__all__ = ["CALL_BEGIN", "CALL_END", "ToolCallStream", "parse_tool_calls", "render_tool_calls", "tool_grammar",
           "tools_system_block"]

CALL_BEGIN = '<tool_call>\n{"name": "'
ARGUMENTS = '", "arguments": '
CALL_END = "}\n</tool_call>"
TRIGGER = "<tool_call>"


def tools_system_block(tools: list[ToolDef]) -> str:
    """The text appended to the system message that describes the tools and the call format."""
    listing = "\n".join(json.dumps({"type": "function", "function": t.function.model_dump(exclude_none=True)},
                                   ensure_ascii=False) for t in tools)
    return ("\n\n# Tools\n\nYou may call one or more functions to help with the user's request.\n\n"
            f"The functions are described inside <tools></tools> XML tags:\n<tools>\n{listing}\n</tools>\n\n"
            "To call a function, reply with a JSON object holding its name and arguments inside "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def render_tool_calls(tool_calls: list[dict]) -> str:
    """An assistant message's `tool_calls` as the text the model would have written."""
    blocks = []
    for call in tool_calls:
        function = call.get("function") or {}
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        blocks.append(f"<tool_call>\n{json.dumps({'name': function.get('name', ''), 'arguments': arguments}, ensure_ascii=False)}"
                      "\n</tool_call>")
    return "\n".join(blocks)


def tool_grammar(tools: list[ToolDef], choice, parallel: bool) -> str | None:
    """EBNF text (xgrammar) constraining a reply for `tool_choice`; None when the reply is free text.

    Args:
        tools: the request's tools.
        choice: "none", "auto", "required" or a NamedToolChoice.
        parallel: allow more than one call in a reply.
    """
    import xgrammar

    if choice == "none":
        return None

    def tag(function) -> dict:
        # compact JSON (no free whitespace: a weak model cannot loop on newlines), as response_format gets
        return {"type": "tag", "begin": CALL_BEGIN + function.name + ARGUMENTS,
                "content": {"type": "grammar", "grammar": json_schema_grammar(function.parameters)}, "end": CALL_END}

    try:
        if choice == "auto":  # free text, with any call in it well-formed
            fmt = {"type": "triggered_tags", "triggers": [TRIGGER], "tags": [tag(t.function) for t in tools],
                   "stop_after_first": not parallel}
        elif choice == "required":  # calls only, at least one, one per line
            fmt = {"type": "tags_with_separator", "tags": [tag(t.function) for t in tools], "separator": "\n",
                   "at_least_one": True, "stop_after_first": not parallel}
        else:
            chosen = [t for t in tools if t.function.name == choice.function.name]
            if not chosen:
                names = ", ".join(t.function.name for t in tools) or "none"
                raise ApiError(400, f"tool_choice names function {choice.function.name!r}, which is not among the "
                                    f"request's tools ({names})", "tool_choice")
            fmt = tag(chosen[0].function)
        grammar = xgrammar.Grammar.from_structural_tag(json.dumps({"type": "structural_tag", "format": fmt}))
    except ApiError:
        raise
    except Exception as err:  # DossierError from json_schema_grammar, or xgrammar's own  # xgrammar reports a bad schema as one of several exception types
        raise ApiError(400, f"a tool's parameters are not a JSON schema xgrammar can enforce: {err}", "tools") from None
    return str(grammar)


@dataclass(slots=True)
class ParsedReply:
    content: str | None
    tool_calls: list[dict] = field(default_factory=list)


def _call(name: str, arguments: str, index: int | None = None) -> dict:
    call = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": arguments}}
    if index is not None:
        call["index"] = index
    return call


def parse_tool_calls(text: str, tools: list[ToolDef]) -> ParsedReply:
    """Split a finished reply into its content and its complete, valid tool calls.

    A block that does not parse as `{"name": known tool, "arguments": {...}}` (possible only
    without a grammar, e.g. tool_choice="none" text) stays in the content.
    """
    known = {t.function.name for t in tools}
    calls, content, position = [], [], 0
    while True:
        start = text.find(TRIGGER, position)
        if start < 0:
            content.append(text[position:])
            break
        end = text.find("</tool_call>", start)
        if end < 0:
            content.append(text[position:])
            break
        body = text[start + len(TRIGGER):end].strip()
        try:
            obj = json.loads(body)
            valid = isinstance(obj, dict) and obj.get("name") in known and isinstance(obj.get("arguments"), dict)
        except json.JSONDecodeError:
            valid = False
        if valid:
            content.append(text[position:start])
            calls.append(_call(obj["name"], _arguments_text(body, obj)))
        else:
            content.append(text[position:end + len("</tool_call>")])
        position = end + len("</tool_call>")
    joined = "".join(content).strip()
    return ParsedReply(joined or None, calls)


def _arguments_text(body: str, obj: dict) -> str:
    """The arguments exactly as generated when the block has the grammar's shape, else re-serialised."""
    prefix = '{"name": "' + obj["name"] + ARGUMENTS
    if body.startswith(prefix) and body.endswith("}"):
        return body[len(prefix):-1]
    return json.dumps(obj["arguments"], ensure_ascii=False)


class ToolCallStream:
    """Turns the growing text of a streamed reply into content deltas and OpenAI tool-call deltas.

    Text that could still turn out to be the start of a `<tool_call>` block, or the end of
    one, is held back until it is certain. Call `feed(text_so_far)` after every step and
    `finish(final_text)` once; each returns a list of OpenAI delta dicts.
    """

    def __init__(self) -> None:
        self.sent_content = 0  # characters of text consumed as content
        self.calls: list[dict] = []  # per open/finished call: {"name", "sent", "done"}
        self.scan = 0  # where parsing resumes in the text

    def feed(self, text: str, final: bool = False) -> list[dict]:
        deltas: list[dict] = []
        while True:
            if self.calls and not self.calls[-1]["done"]:
                if not self._continue_call(text, deltas, final):
                    return deltas
                continue
            start = text.find(TRIGGER, self.scan)
            if start < 0:
                # content up to anything that may be the start of a trigger
                hold = 0 if final else _partial_suffix(text, TRIGGER)
                self._content(text, len(text) - hold, deltas)
                return deltas
            self._content(text, start, deltas)
            begin_end = text.find(ARGUMENTS, start)
            if not text.startswith(CALL_BEGIN, start) or begin_end < 0:
                if final or (not CALL_BEGIN.startswith(text[start:start + len(CALL_BEGIN)])):
                    self._content(text, start + len(TRIGGER), deltas)  # not a call after all: plain text
                    self.scan = start + len(TRIGGER)
                    continue
                return deltas
            name = text[start + len(CALL_BEGIN):begin_end]
            call = _call(name, "", index=len(self.calls))
            deltas.append({"tool_calls": [call]})
            self.calls.append({"args_start": begin_end + len(ARGUMENTS), "sent": 0, "done": False})
            self.scan = self.sent_content = begin_end + len(ARGUMENTS)

    def finish(self, text: str) -> list[dict]:
        return self.feed(text, final=True)

    def _continue_call(self, text: str, deltas: list[dict], final: bool) -> bool:
        call = self.calls[-1]
        start = call["args_start"]
        end = text.find(CALL_END, start)
        if end >= 0:
            limit, call["done"] = end, True
        else:
            limit = len(text) if final else len(text) - _partial_suffix(text, CALL_END)
        piece = text[start + call["sent"]:limit]
        if piece:
            deltas.append({"tool_calls": [{"index": len(self.calls) - 1, "function": {"arguments": piece}}]})
            call["sent"] += len(piece)
        if call["done"]:
            self.scan = self.sent_content = end + len(CALL_END)
            return True
        if final:
            call["done"] = True
        return False

    def _content(self, text: str, upto: int, deltas: list[dict]) -> None:
        if upto > self.sent_content:
            piece = text[self.sent_content:upto]
            if piece.strip() or not self.calls:  # whitespace between calls is not content (as in parse_tool_calls)
                deltas.append({"content": piece})
            self.sent_content = upto

    @property
    def num_calls(self) -> int:
        return len(self.calls)


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper start of `marker` (0 if none)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
