"""`POST /v1/completions`: plain text (or token ids) in, text out, no chat template.

Several prompts in one request are submitted together (the engine batches them) and come
back as one choice each, in order; streamed, their chunks interleave, each tagged with its
choice index.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, StreamingResponse

from engine.serve.backend import Finished
from engine.serve.clients import request_client
from engine.serve.generate import FINISH_REASONS, TextDeltas, check_finished, sampling_for, sse, usage, wait_finished
from engine.serve.prompt import Prompt
from engine.serve.protocol import ApiError, CompletionRequest
from models.base import Segment

__all__ = ["completion"]

MAX_PROMPTS = 64


def _prompts(request: CompletionRequest, processor) -> list[list[int]]:
    prompt = request.prompt
    if isinstance(prompt, str):
        items = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        items = [prompt]
    else:
        items = list(prompt)
    if not items or len(items) > MAX_PROMPTS:
        raise ApiError(400, f"prompt must hold 1-{MAX_PROMPTS} prompts (got {len(items)})", "prompt")
    out = []
    for i, item in enumerate(items):
        ids = processor.encode(item) if isinstance(item, str) else list(item)
        if not ids:
            raise ApiError(400, f"prompt {i} is empty", "prompt")
        out.append(ids)
    return out


async def completion(request: CompletionRequest, http_request, state):
    processor = state.backend.processor
    token_lists = await run_in_threadpool(_prompts, request, processor)
    client = request_client(http_request.headers, state.config.api_key, request.cache_salt)
    plans = [(Prompt([Segment(ids)], client), sampling_for(request, request.max_tokens, len(ids), state.context))
             for ids in token_lists]
    loop = asyncio.get_running_loop()
    generations = []
    try:
        for prompt, sampling in plans:
            generations.append(await run_in_threadpool(state.backend.submit, prompt, sampling, loop,
                                                       stream=request.stream))
    except BaseException:
        for generation in generations:
            state.backend.cancel(generation)
        raise
    reply_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    if request.stream:
        return StreamingResponse(_stream(generations, plans, request, state, reply_id, created),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    results: list[Finished] = []
    try:
        for generation in generations:
            results.append(await wait_finished(generation, state.backend, http_request))
    except BaseException:
        for generation in generations:
            state.backend.cancel(generation)
        raise
    for finished in results:
        check_finished(finished)
    choices = [{"index": i, "text": f.text, "finish_reason": FINISH_REASONS[f.reason.value], "logprobs": None}
               for i, f in enumerate(results)]
    totals = usage(sum(f.prompt_tokens for f in results), sum(len(f.output_token_ids) for f in results),
                   sum(f.cached_tokens for f in results))
    return JSONResponse({"id": reply_id, "object": "text_completion", "created": created, "model": request.model,
                         "choices": choices, "usage": totals})


async def _stream(generations, plans, request: CompletionRequest, state, reply_id: str, created: int):
    merged: asyncio.Queue = asyncio.Queue()

    async def forward(index: int, generation):
        async for item in generation.events():
            await merged.put((index, item))

    tasks = [asyncio.create_task(forward(i, g)) for i, g in enumerate(generations)]
    texts = [TextDeltas(state.backend.processor, sampling.stop) for _, sampling in plans]
    done: dict[int, Finished] = {}

    def chunk(index: int, text: str, reason: str | None = None) -> str:
        return sse({"id": reply_id, "object": "text_completion", "created": created, "model": request.model,
                    "choices": [{"index": index, "text": text, "finish_reason": reason, "logprobs": None}]})

    try:
        while len(done) < len(generations):
            index, item = await merged.get()
            if isinstance(item, Finished):
                done[index] = item
                if item.reason.value == "error":
                    yield sse({"error": ApiError(500, f"generation failed: {item.error}").body()["error"]})
                    continue
                yield chunk(index, texts[index].finish(item.text), FINISH_REASONS[item.reason.value])
            else:
                piece = texts[index].add(item)
                if piece:
                    yield chunk(index, piece)
        if request.stream_options and request.stream_options.include_usage:
            results = list(done.values())
            yield sse({"id": reply_id, "object": "text_completion", "created": created, "model": request.model,
                       "choices": [], "usage": usage(sum(f.prompt_tokens for f in results),
                                                     sum(len(f.output_token_ids) for f in results),
                                                     sum(f.cached_tokens for f in results))})
        yield sse("[DONE]")
    finally:
        for task in tasks:
            task.cancel()
        for generation in generations:
            if generation.finished is None:
                state.backend.cancel(generation)
