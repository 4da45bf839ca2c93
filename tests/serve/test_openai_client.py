"""`dossier serve` with the official openai client: chat, streaming, tools, JSON schema, cache, completions.

The model is the engine tests' tiny random Llama, so replies are gibberish; what is checked
is the protocol: greedy replies equal HF `generate` on the same tokens, streams equal their
non-streamed replies, every tool call parses and validates against its schema, and a
conversation re-sent with the server's own reply appended is served from the cache.
"""

import json
import threading

import pytest

from engine.serve.prompt import ImageLimits, render_chat
from engine.serve.protocol import ChatMessage
from tests.engine.conftest import hf_greedy
from tools.schema import ToolSpec

MESSAGES = [{"role": "system", "content": "You are a document agent."},
            {"role": "user", "content": "What was the revenue in 2019?"}]
TOOLS = [
    {"type": "function", "function": {"name": "search", "description": "Search the pages.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 8}},
        "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "answer", "description": "Final answer.", "parameters": {
        "type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                         "page": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["answer", "page"], "additionalProperties": False}}},
]
SPECS = {t["function"]["name"]: ToolSpec(t["function"]["name"], t["function"]["description"],
                                         t["function"]["parameters"]) for t in TOOLS}


def chat(live, **kwargs):
    kwargs.setdefault("messages", MESSAGES)
    kwargs.setdefault("max_tokens", 16)
    kwargs.setdefault("temperature", 0)
    return live.client.chat.completions.create(model=live.model, **kwargs)


def streamed(live, **kwargs):
    """(content, {index: [name, arguments]}, finish_reason, usage) of a streamed reply."""
    content, calls, reason, usage = [], {}, None, None
    for chunk in chat(live, stream=True, stream_options={"include_usage": True}, **kwargs):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content.append(choice.delta.content or "")
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, ["", ""])
                entry[0] += call.function.name or ""
                entry[1] += call.function.arguments or ""
            reason = choice.finish_reason or reason
    return "".join(content), calls, reason, usage


def test_plain_chat_equals_hf_generate_on_the_same_tokens(live, tiny_folder):
    _, hf, tokenizer = tiny_folder
    reply = chat(live, max_tokens=12)
    processor = live.backend.processor
    prompt = render_chat(processor, [ChatMessage(**m) for m in MESSAGES], None, None, ImageLimits(1, 1, 1))
    expected = hf_greedy(hf, prompt.token_ids, 12, sorted(processor.stop_token_ids))
    assert reply.choices[0].message.content == processor.decode(expected)
    assert reply.choices[0].finish_reason == ("stop" if expected[-1] in processor.stop_token_ids else "length")
    assert reply.usage.prompt_tokens == prompt.num_tokens
    assert reply.usage.completion_tokens == len(expected)
    assert reply.usage.total_tokens == prompt.num_tokens + len(expected)


def test_streaming_equals_the_non_streamed_reply(live):
    whole = chat(live, max_tokens=24)
    content, calls, reason, usage = streamed(live, max_tokens=24)
    assert content == whole.choices[0].message.content and not calls
    assert reason == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "answer"}}])
def test_tool_calls_parse_and_validate(live, choice):
    reply = chat(live, tools=TOOLS, tool_choice=choice, max_tokens=120)
    message = reply.choices[0].message
    calls = message.tool_calls or []
    if choice != "auto":  # a call is forced (auto: the tiny model may write text instead)
        assert calls and reply.choices[0].finish_reason == "tool_calls"
    if isinstance(choice, dict):
        assert {c.function.name for c in calls} == {"answer"}
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        SPECS[call.function.name].validate(json.loads(call.function.arguments))  # raises if invalid
    content, streamed_calls, reason, _ = streamed(live, tools=TOOLS, tool_choice=choice, max_tokens=120)
    assert [(c.function.name, c.function.arguments) for c in calls] == [tuple(streamed_calls[i])
                                                                         for i in sorted(streamed_calls)]
    assert reason == reply.choices[0].finish_reason
    assert (content or None) == (message.content or None)


def test_tools_can_be_switched_off_and_unknown_named_tools_are_refused(live):
    import openai

    reply = chat(live, tools=TOOLS, tool_choice="none", max_tokens=8)
    assert reply.choices[0].message.tool_calls is None
    with pytest.raises(openai.BadRequestError, match="not among the request's tools"):
        chat(live, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})


def test_response_format_json_schema_and_json_object(live):
    schema = {"type": "object", "properties": {"year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                                               "ok": {"type": "boolean"}},
              "required": ["year", "ok"], "additionalProperties": False}
    reply = chat(live, max_tokens=60, response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    value = json.loads(reply.choices[0].message.content)
    assert set(value) == {"year", "ok"} and 1900 <= value["year"] <= 2100 and isinstance(value["ok"], bool)
    reply = chat(live, max_tokens=60, response_format={"type": "json_object"})
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_second_turn_is_served_from_the_cache(live):
    first = chat(live, max_tokens=10)
    assert first.usage.prompt_tokens_details.cached_tokens >= 0
    history = MESSAGES + [first.choices[0].message.model_dump(exclude_none=True),
                          {"role": "user", "content": "And in 2020?"}]
    second = chat(live, messages=history, max_tokens=10)
    seen = first.usage.prompt_tokens + first.usage.completion_tokens
    # everything but the last sampled token (never fed back) and the partial last block comes from the cache
    assert second.usage.prompt_tokens_details.cached_tokens >= seen - 1 - 3
    assert second.usage.prompt_tokens > seen


def test_pinned_session_keeps_the_whole_history(live):
    pin = {"session_id": "conversation-1"}
    first = chat(live, max_tokens=10, extra_body=pin)
    history = MESSAGES + [first.choices[0].message.model_dump(exclude_none=True),
                          {"role": "user", "content": "And in 2020?"}]
    second = chat(live, messages=history, max_tokens=10, extra_body=pin)
    seen = first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == seen - 1  # the session kept even the partial block
    assert live.stats()["server"]["pinned_appends"] >= 1
    import httpx2

    assert httpx2.delete(live.url + "/v1/sessions/conversation-1").json()["deleted"] is True
    assert httpx2.delete(live.url + "/v1/sessions/conversation-1").status_code == 404


def test_concurrent_clients_are_batched(live):
    before = live.stats()["counters"]["forward_steps"]
    replies: list = [None] * 8

    def one(i):
        replies[i] = chat(live, messages=[{"role": "user", "content": f"Question {i}: what is on page {i}?"}],
                          max_tokens=12, extra_body={"ignore_eos": True})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.usage.completion_tokens == 12 for r in replies)
    steps = live.stats()["counters"]["forward_steps"] - before
    assert steps < 8 * 12, f"{steps} forward steps for 8 x 12 tokens: requests were not batched"


def test_completions_text_token_ids_and_several_prompts(live):
    one = live.client.completions.create(model=live.model, prompt="The revenue in 2019 was", max_tokens=6, temperature=0)
    assert one.object == "text_completion" and one.usage.completion_tokens <= 6
    ids = live.backend.processor.encode("The revenue in 2019 was")
    again = live.client.completions.create(model=live.model, prompt=ids, max_tokens=6, temperature=0)
    assert again.choices[0].text == one.choices[0].text
    both = live.client.completions.create(model=live.model, prompt=["Page 3", "Page 4"], max_tokens=5, temperature=0)
    assert [c.index for c in both.choices] == [0, 1]
    parts = {0: "", 1: ""}
    for chunk in live.client.completions.create(model=live.model, prompt=["Page 3", "Page 4"], max_tokens=5,
                                                temperature=0, stream=True):
        for choice in chunk.choices:
            parts[choice.index] += choice.text
    assert [parts[0], parts[1]] == [c.text for c in both.choices]


def test_models_and_health(live):
    import httpx2

    assert [m.id for m in live.client.models.list()] == ["tiny"]
    assert httpx2.get(live.url + "/health").json() == {"status": "ok"}


def test_seeded_sampling_is_reproducible(live):
    a = chat(live, temperature=1.0, top_p=0.9, seed=7, max_tokens=10)
    b = chat(live, temperature=1.0, top_p=0.9, seed=7, max_tokens=10)
    assert a.choices[0].message.content == b.choices[0].message.content


def test_stop_string_is_cut_from_the_reply(live):
    whole = chat(live, max_tokens=16, extra_body={"ignore_eos": True}).choices[0].message.content
    stop = whole[5:8]
    assert stop.strip(), whole
    cut = chat(live, max_tokens=16, stop=[stop], extra_body={"ignore_eos": True})
    assert cut.choices[0].message.content == whole[: whole.find(stop)]
    assert cut.choices[0].finish_reason == "stop"
    content, _, reason, _ = streamed(live, max_tokens=16, stop=[stop], extra_body={"ignore_eos": True})
    assert content == whole[: whole.find(stop)] and reason == "stop"
