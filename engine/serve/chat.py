"""`POST /v1/chat/completions`: render the conversation, constrain the reply, answer or stream it.

The reply is free text, JSON (`response_format`), or tool calls (`tools` + `tool_choice`,
see `tool_calls.py`). Every reply the server returns is remembered as the exact tokens it
generated, so the same conversation re-sent with that reply appended is found in the
prefix cache token for token. Both the cache and that memory are the client's own
(engine/serve/clients.py): another client re-sending the same text finds neither.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, StreamingResponse

from engine.core.sampling_params import SamplingParams
from engine.core.structured import check_schema_limits
from engine.serve.backend import Finished, Generation
from engine.serve.clients import SessionKey, request_client
from engine.serve.generate import FINISH_REASONS, TextDeltas, check_finished, sampling_for, sse, usage, wait_finished
from engine.serve.prompt import ImageLimits, Prompt, ReplyMemory, render_chat, reply_key
from engine.serve.protocol import ApiError, ChatCompletionRequest
from engine.serve.tool_calls import ToolCallStream, parse_tool_calls, tool_grammar, tools_system_block

__all__ = ["ChatPlan", "chat_completion", "plan_chat"]


@dataclass(slots=True)
class ChatPlan:
    prompt: Prompt
    sampling: SamplingParams
    tools_active: bool  # the reply is parsed for tool calls


def plan_chat(request: ChatCompletionRequest, state, client: str | None = None) -> ChatPlan:
    """Render and check a chat request of `client` (its cache salt) (blocking: tokenisation, image decoding,
    grammar compilation)."""
    tools = request.tools or []
    choice = request.tool_choice or ("auto" if tools else "none")
    if choice != "none" and not tools:
        raise ApiError(400, f"tool_choice={_choice_name(choice)!r} needs a non-empty 'tools' list", "tool_choice")
    if len({t.function.name for t in tools}) != len(tools):
        raise ApiError(400, "tool names must be unique", "tools")
    response_format = request.response_format
    structured = response_format is not None and response_format.type != "text"
    if structured and choice != "none":
        raise ApiError(400, "give either tools (with tool_choice other than 'none') or response_format, not both",
                       "response_format")
    structure: dict = {}
    schema_limits = state.config.schema_limits  # checked before xgrammar reads a schema: a huge enum is a 400, not a stall
    if choice != "none":  # all tools together: their grammar is one
        check_schema_limits([t.function.parameters for t in tools], schema_limits, "the tools' parameters")
        structure["grammar"] = tool_grammar(tools, choice, request.parallel_tool_calls)
    elif structured:
        if response_format.type == "json_object":
            structure["json_schema"] = {"type": "object"}
        else:
            schema = response_format.json_schema.schema_ if response_format.json_schema else None
            if not isinstance(schema, dict):
                raise ApiError(400, "response_format json_schema needs json_schema.schema (a JSON schema object)",
                               "response_format")
            check_schema_limits(schema, schema_limits, "response_format's json_schema")
            structure["json_schema"] = schema
    limits = ImageLimits(state.config.max_image_bytes, state.config.max_image_pixels,
                         state.config.max_images_per_request, state.config.max_request_pixels)
    prompt = render_chat(state.backend.processor, request.messages, tools_system_block(tools) if tools else None,
                         _ClientMemory(state.memory, client), limits)
    prompt.cache_salt = client
    max_tokens = request.max_completion_tokens or request.max_tokens
    sampling = sampling_for(request, max_tokens, prompt.num_tokens, state.context, **structure)
    return ChatPlan(prompt, sampling, choice != "none")


def _choice_name(choice) -> str:
    return choice if isinstance(choice, str) else choice.function.name


async def chat_completion(request: ChatCompletionRequest, http_request, state):
    """Answer one chat request (JSON) or stream it (SSE)."""
    client = request_client(http_request.headers, state.config.api_key, request.cache_salt)
    plan = await run_in_threadpool(plan_chat, request, state, client)
    await state.backend.prepare_structure(plan.sampling)  # awaited on the loop: no request thread waits on a compile
    loop = asyncio.get_running_loop()
    pin = None if request.session_id is None else SessionKey(client, request.session_id)
    generation = await run_in_threadpool(state.backend.submit, plan.prompt, plan.sampling, loop,
                                         pin=pin, stream=request.stream)
    reply_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if request.stream:
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        events = _stream(generation, plan, request, state, client, reply_id, created, include_usage)
        return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    finished = await wait_finished(generation, state.backend, http_request)
    check_finished(finished)
    message, reason = _message(finished.text, plan, request, finished)
    _remember(state, client, message, finished)
    body = {
        "id": reply_id, "object": "chat.completion", "created": created, "model": request.model,
        "choices": [{"index": 0, "message": message, "finish_reason": reason, "logprobs": None}],
        "usage": usage(finished.prompt_tokens, len(finished.output_token_ids), finished.cached_tokens),
    }
    return JSONResponse(body)


def _message(text: str, plan: ChatPlan, request: ChatCompletionRequest, finished: Finished) -> tuple[dict, str]:
    reason = FINISH_REASONS[finished.reason.value]
    if not plan.tools_active:
        return {"role": "assistant", "content": text}, reason
    parsed = parse_tool_calls(text, request.tools or [])
    message = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["tool_calls"] = parsed.tool_calls
        reason = "tool_calls" if reason == "stop" else reason
    return message, reason


class _ClientMemory:
    """The server's reply memory as one client sees it: only the replies that client was given.

    Shared, it would tell a client whether another was given some reply: a remembered reply sent
    back as history becomes its generated tokens, and `prompt_tokens` tells the two apart.
    """

    __slots__ = ("memory", "client")

    def __init__(self, memory: ReplyMemory, client: str | None) -> None:
        self.memory, self.client = memory, client

    def recall(self, key: str):
        return self.memory.recall(_client_key(self.client, key))


def _client_key(client: str | None, key: str) -> str:
    return key if client is None else f"{client}:{key}"


def _remember(state, client: str | None, message: dict, finished: Finished) -> None:
    """Keep the reply's exact tokens for when the client sends this message back in its history."""
    if finished.reason.value not in ("stop", "length"):
        return  # a stop string was cut from the text: the tokens no longer match what the client holds
    processor = state.backend.processor
    generated = processor.generation_prompt().token_ids + finished.output_token_ids
    closing = processor.close_turn(finished.output_token_ids).token_ids
    key = reply_key(message.get("content"), message.get("tool_calls"))
    state.memory.remember(_client_key(client, key), generated, closing)


async def _stream(generation: Generation, plan: ChatPlan, request: ChatCompletionRequest, state, client: str | None,
                  reply_id: str, created: int, include_usage: bool):
    def chunk(delta: dict, reason: str | None = None) -> str:
        return sse({"id": reply_id, "object": "chat.completion.chunk", "created": created, "model": request.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}]})

    text = TextDeltas(state.backend.processor, plan.sampling.stop)
    calls = ToolCallStream() if plan.tools_active else None
    content: list[str] = []
    arguments: dict[int, list] = {}

    def emit(deltas: list[dict]):
        for delta in deltas:
            if "content" in delta:
                content.append(delta["content"])
            for call in delta.get("tool_calls", []):
                entry = arguments.setdefault(call["index"], [call.get("function", {}).get("name"), ""])
                entry[1] += call.get("function", {}).get("arguments", "")
            yield chunk(delta)

    try:
        yield chunk({"role": "assistant", "content": ""})
        finished = None
        async for item in generation.events():
            if isinstance(item, Finished):
                finished = item
                break
            piece = text.add(item)
            if calls is None:
                for out in emit([{"content": piece}] if piece else []):
                    yield out
            else:
                for out in emit(calls.feed(text.visible())):
                    yield out
        if finished.reason.value == "error":
            yield sse({"error": ApiError(500, f"generation failed: {finished.error}").body()["error"]})
            yield sse("[DONE]")
            return
        if calls is None:
            rest = text.finish(finished.text)
            for out in emit([{"content": rest}] if rest else []):
                yield out
        else:
            for out in emit(calls.finish(finished.text)):
                yield out
        reason = FINISH_REASONS[finished.reason.value]
        if calls is not None and calls.num_calls and reason == "stop":
            reason = "tool_calls"
        # remembered before the last events: a client may hang up as soon as it has them
        tool_calls = [{"function": {"name": name, "arguments": args}} for _, (name, args) in sorted(arguments.items())]
        _remember(state, client, {"content": "".join(content) or None, "tool_calls": tool_calls or None}, finished)
        yield chunk({}, reason)
        if include_usage:
            yield sse({"id": reply_id, "object": "chat.completion.chunk", "created": created, "model": request.model,
                       "choices": [], "usage": usage(finished.prompt_tokens, len(finished.output_token_ids),
                                                    finished.cached_tokens)})
        yield sse("[DONE]")
    finally:
        if generation.finished is None:
            state.backend.cancel(generation)  # the client went away mid-stream: free the sequence now
