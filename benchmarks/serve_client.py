"""A MADQA-style BM25 agent as an HTTP client of any OpenAI-compatible server (ours or a peer).

Written like MADQA's published vLLM agent (Algorithm 1 of the paper): a stateless client
that re-sends the whole conversation each turn, T iterations at most, BM25 search over the
corpus with k pages per query, and the last iteration forced to answer. Two ways to talk:

- `tools` (MADQA's): OpenAI tools `search_documents(query)` and `provide_answer(answer,
  citations)`; `tool_choice="required"` each turn, the named `provide_answer` on the last.
  Search results come back as a tool message; with `images=True` the hit pages follow as a
  user message of base64 PNG data URLs (OpenAI's API admits images only in user messages).
- `text`: no tools; the reply is our BM25 agent's JSON turn (`engine/agents/protocol.py`),
  parsed and, if malformed, answered with the same correction our agent gets. For servers
  without tool calling (e.g. `transformers serve` ignores `tool_choice` and parses no calls for SmolLM2).

Each request streams, so the client measures time to first token; usage (prompt and cached
tokens) is read from the final chunk when the server sends it (`stream_usage=True`).
"""

from __future__ import annotations

import base64
import io
import json
import time
from dataclasses import dataclass, field

from engine.agents import prompts
from engine.agents.env import AgentEnv
from engine.agents.protocol import AnswerCall, Malformed, SearchCall, parse_tool_call
from engine.datasets.formats import Question

__all__ = ["EpisodeRecord", "HarnessSettings", "MadqaHarness", "TOOLS", "TurnRecord", "madqa_tools"]

SYSTEM = """\
You answer questions about a collection of PDF documents. The answer is definitely in the documents: \
find it with search_documents, read the pages it returns, then call provide_answer.
- search_documents takes a few keywords and returns the {k} best pages, each labelled "File: <file>, Page: <n>". \
Keywords are combined with AND; OR, NOT, "exact phrases" and wildcards such as revenu* work.
- If a search finds nothing useful, try different terms: synonyms, abbreviations, a rephrasing.
- provide_answer takes the answer as a list (one element for a single answer) and the file and page of every \
page you used. Use as few words as possible, the document's own words; do not write full sentences."""

def madqa_tools(max_chars: int = 100, max_items: int = 5) -> list[dict]:
    """MADQA's two tools in the OpenAI format, strings and lists bounded (a weak model cannot run on forever)."""
    text = {"type": "string", "minLength": 1, "maxLength": max_chars}
    return [
        {"type": "function", "function": {
            "name": "search_documents",
            "description": "BM25 search over every page of the collection; returns the best pages.",
            "parameters": {"type": "object", "properties": {"query": text}, "required": ["query"],
                           "additionalProperties": False}}},
        {"type": "function", "function": {
            "name": "provide_answer",
            "description": "Give the final answer with the pages that support it. Ends the task.",
            "parameters": {"type": "object", "properties": {
                "answer": {"type": "array", "items": text, "minItems": 1, "maxItems": max_items},
                "citations": {"type": "array", "maxItems": max_items, "items": {
                    "type": "object", "properties": {"file": text, "page": {"type": "integer", "minimum": 1,
                                                                             "maximum": 100000}},
                    "required": ["file", "page"], "additionalProperties": False}}},
                "required": ["answer", "citations"], "additionalProperties": False}}},
    ]


TOOLS = madqa_tools()


@dataclass(slots=True)
class HarnessSettings:
    mode: str = "tools"  # "tools" (MADQA's OpenAI tools) or "text" (our JSON turn in the reply text)
    max_iterations: int = 10  # T (MADQA: 10); the last one must answer
    k: int = 5  # pages per search (MADQA: 5)
    max_tokens: int = 128  # tokens per reply
    images: bool = False  # show hit pages as images (vision-language models)
    image_dpi: int = 72
    image_max_pixels: int = 200_704
    page_chars: int = 600  # text shown per hit (text observation)
    stream_usage: bool = True  # ask for usage in the stream (servers that refuse stream_options: False)
    temperature: float = 0.0
    extra_body: dict = field(default_factory=dict)  # e.g. {"session_id": ...} (ours), sent with every request
    tools: list = field(default_factory=madqa_tools)  # the OpenAI tools of the tools mode
    parallel_tool_calls: bool = False  # MADQA's loop takes one action per iteration
    search_first: bool = False  # force search_documents on the first turn (MADQA lets the model choose)


@dataclass(slots=True)
class TurnRecord:
    ttft_s: float | None  # request sent -> first generated text or tool-call delta
    latency_s: float  # request sent -> stream ended
    prompt_tokens: int | None  # from usage, when the server reports it
    cached_tokens: int | None
    completion_tokens: int | None
    raw: str  # content, or the tool calls as JSON


@dataclass(slots=True)
class EpisodeRecord:
    qid: str
    answer: list[str] | None
    citations: list[dict]
    search_history: list[str]
    turns: list[TurnRecord]
    reason: str  # "answered", "max_iterations" or "error: ..."
    wall_s: float


class MadqaHarness:
    """Runs episodes against one server; thread-safe (one episode per thread).

    Args:
        client: an `openai.OpenAI` client pointed at the server.
        model: the model name the server expects.
        env: search and pages over the corpus.
        settings: how to talk to the server.
    """

    def __init__(self, client, model: str, env: AgentEnv, settings: HarnessSettings | None = None) -> None:
        self.client, self.model, self.env = client, model, env
        self.settings = settings or HarnessSettings()

    def run(self, question: Question) -> EpisodeRecord:
        s = self.settings
        started = time.perf_counter()
        system = SYSTEM if s.mode == "tools" else prompts.SEARCH_AGENT_SYSTEM
        messages: list[dict] = [{"role": "system", "content": system.replace("{k}", str(s.k))},
                                {"role": "user", "content": prompts.format_question(question.question)}]
        turns: list[TurnRecord] = []
        searches: list[str] = []
        try:
            for iteration in range(1, s.max_iterations + 1):
                last = iteration == s.max_iterations
                reply, record = self._call(messages, last, first=iteration == 1)
                turns.append(record)
                if s.mode == "tools":
                    done = self._tools_turn(reply, messages, searches)
                else:
                    done = self._text_turn(reply, messages, searches, last, s.max_iterations - iteration)
                if done is not None:
                    return EpisodeRecord(question.id, done.answer, [c.to_json() for c in done.citations], searches,
                                         turns, "answered", time.perf_counter() - started)
        except Exception as err:  # one failed episode must not stop the others
            return EpisodeRecord(question.id, None, [], searches, turns, f"error: {type(err).__name__}: {err}",
                                 time.perf_counter() - started)
        return EpisodeRecord(question.id, None, [], searches, turns, "max_iterations", time.perf_counter() - started)

    # --- one model call ------------------------------------------------------------------

    def _call(self, messages: list[dict], last: bool, first: bool) -> tuple[dict, TurnRecord]:
        s = self.settings
        kwargs: dict = dict(model=self.model, messages=messages, max_tokens=s.max_tokens, temperature=s.temperature,
                            stream=True)
        if s.stream_usage:
            kwargs["stream_options"] = {"include_usage": True}
        if s.mode == "tools":
            kwargs["tools"] = s.tools
            kwargs["parallel_tool_calls"] = s.parallel_tool_calls
            forced = "provide_answer" if last else "search_documents" if first and s.search_first else None
            kwargs["tool_choice"] = {"type": "function", "function": {"name": forced}} if forced else "required"
        if s.extra_body:
            kwargs["extra_body"] = s.extra_body
        sent = time.perf_counter()
        first = None
        content: list[str] = []
        calls: dict[int, dict] = {}
        usage = None
        for chunk in self.client.chat.completions.create(**kwargs):
            if chunk.usage is not None:
                usage = chunk.usage
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                first = first or time.perf_counter()
                content.append(delta.content)
            for call in delta.tool_calls or []:
                first = first or time.perf_counter()
                entry = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
                entry["name"] += (call.function.name or "") if call.function else ""
                entry["arguments"] += (call.function.arguments or "") if call.function else ""
        latency = time.perf_counter() - sent
        reply = {"role": "assistant", "content": "".join(content) or None}
        if calls:
            reply["tool_calls"] = [{"id": c["id"] or f"call_{i}", "type": "function",
                                    "function": {"name": c["name"], "arguments": c["arguments"]}}
                                   for i, c in sorted(calls.items())]
        details = getattr(usage, "prompt_tokens_details", None) if usage is not None else None
        record = TurnRecord(None if first is None else first - sent, latency,
                            getattr(usage, "prompt_tokens", None), getattr(details, "cached_tokens", None),
                            getattr(usage, "completion_tokens", None),
                            json.dumps(reply.get("tool_calls")) if calls else (reply["content"] or ""))
        return reply, record

    # --- MADQA's tools ----------------------------------------------------------------------

    def _tools_turn(self, reply: dict, messages: list[dict], searches: list[str]) -> AnswerCall | None:
        messages.append(reply)
        images: list[dict] = []
        for call in reply.get("tool_calls") or []:
            name = call["function"]["name"]
            try:
                arguments = json.loads(call["function"]["arguments"] or "{}")
            except json.JSONDecodeError:  # cut off by max_tokens: a malformed turn, answered as our agent's are
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": "Error: this call was cut off at the token limit (its arguments are not "
                                            "complete JSON). Call the tool again, shorter."})
                continue
            if name == "provide_answer":
                from engine.datasets.formats import Evidence

                citations = [Evidence(c["file"], int(c["page"])) for c in arguments.get("citations", [])]
                return AnswerCall([str(a) for a in arguments["answer"]], citations)
            query = arguments["query"]
            searches.append(query)
            hits, error = self.env.search(query, self.settings.k)
            if error:
                text = f"Search error: {error}"
            elif not hits:
                text = prompts.NO_HITS
            elif self.settings.images:
                text = "Found pages: " + ", ".join(f"File: {h.document}, Page: {h.page}" for h in hits)
                images += self._page_images(hits)
            else:
                text = prompts.format_hits(query, [(h.document, h.page, h.text[: self.settings.page_chars])
                                                   for h in hits])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        if images:
            messages.append({"role": "user", "content": images})
        if not reply.get("tool_calls"):
            messages.append({"role": "user", "content": "Call search_documents or provide_answer."})
        return None

    def _page_images(self, hits) -> list[dict]:
        parts: list[dict] = []
        for hit in hits:
            image = self.env.page_image(hit.document, hit.page, self.settings.image_dpi, self.settings.image_max_pixels)
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
            parts += [{"type": "text", "text": f"File: {hit.document}, Page: {hit.page}\n"},
                      {"type": "image_url", "image_url": {"url": url}}]
        return parts

    # --- our JSON turn in plain text ------------------------------------------------------

    def _text_turn(self, reply: dict, messages: list[dict], searches: list[str], last: bool,
                   turns_left: int) -> AnswerCall | None:
        messages.append({"role": "assistant", "content": reply["content"] or ""})
        call = parse_tool_call(reply["content"] or "", allow_search=not last)
        if isinstance(call, AnswerCall):
            return call
        if isinstance(call, Malformed):
            observation = prompts.MALFORMED.format(reason=call.reason)
        else:
            assert isinstance(call, SearchCall)
            searches.append(call.query)
            hits, error = self.env.search(call.query, self.settings.k)
            if error:
                observation = f"Search error: {error}"
            elif not hits:
                observation = prompts.NO_HITS
            else:
                observation = prompts.format_hits(call.query, [(h.document, h.page, h.text[: self.settings.page_chars])
                                                               for h in hits])
        messages.append({"role": "user", "content": observation + prompts.turn_footer(turns_left)})
        return None
