"""What chat and text completions share: sampling from a request, waiting for a result, streaming text.

- `sampling_for` turns the OpenAI parameters into `SamplingParams` (a temperature under
  `GREEDY_BELOW` is greedy) and checks the context:
  a prompt plus `max_tokens` beyond the model's context (or the KV pool) is a 400 that
  says both numbers, as vLLM does; without `max_tokens` the reply may use the rest.
- `wait_finished` waits for a non-streamed result, cancelling it when the client goes away.
- `TextDeltas` decodes a growing token list into text deltas, holding back an incomplete
  UTF-8 character and anything that could become a stop string. It decodes only the new
  tokens and a few before them, and searches only the new text (engine/core/detokenizer.py):
  re-decoding the whole reply for every token cost 4.5 ms a token at 8,000 tokens, on the
  event loop every other client waits on.
"""

from __future__ import annotations

import asyncio
import json
import math

from engine.core.detokenizer import IncrementalDetokenizer, StopScan
from engine.core.sampling_params import SamplingParams
from engine.serve.backend import Finished, Generation
from engine.serve.protocol import ApiError
from tools.errors import DossierError

__all__ = ["TextDeltas", "sampling_for", "sse", "usage", "wait_finished", "FINISH_REASONS"]

# engine finish reason -> OpenAI finish_reason
FINISH_REASONS = {"stop": "stop", "stop_string": "stop", "length": "length", "cancelled": "abort", "error": "error"}
MAX_STOP_STRINGS = 16
# A temperature below this samples as greedy decoding (vLLM's epsilon): dividing float32 logits by
# 1e-40 gives inf, and the NaN probabilities would fail the engine step every request shares.
GREEDY_BELOW = 1e-5


def sampling_for(request, max_tokens: int | None, prompt_tokens: int, context: int, **structure) -> SamplingParams:
    """`SamplingParams` for an OpenAI request whose prompt is `prompt_tokens` long.

    Args:
        request: a ChatCompletionRequest or CompletionRequest.
        max_tokens: the reply's token limit the request asked for (None: the rest of the context).
        prompt_tokens: tokens of the rendered prompt.
        context: longest sequence this server can hold (model context and KV pool, the smaller).
        structure: json_schema= or grammar= for constrained decoding.
    """
    if prompt_tokens >= context:
        raise ApiError(400, f"the prompt is {prompt_tokens} tokens, but this server takes at most {context} tokens "
                            "(prompt and reply together); shorten the conversation", "messages")
    if max_tokens is None:
        max_tokens = context - prompt_tokens
    elif prompt_tokens + max_tokens > context:
        raise ApiError(400, f"this server's maximum context length is {context} tokens; the request asks for "
                            f"{prompt_tokens + max_tokens} ({prompt_tokens} in the prompt, {max_tokens} in the reply); "
                            "lower max_tokens or shorten the prompt", "max_tokens")
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    if len(stop) > MAX_STOP_STRINGS or not all(stop):
        raise ApiError(400, f"stop takes 1-{MAX_STOP_STRINGS} non-empty strings (got {stop!r:.200})", "stop")
    if request.min_tokens > max_tokens:
        raise ApiError(400, f"min_tokens ({request.min_tokens}) exceeds max_tokens ({max_tokens})", "min_tokens")
    temperature = 1.0 if request.temperature is None else request.temperature
    if not math.isfinite(temperature) or not math.isfinite(request.top_p if request.top_p is not None else 1.0):
        raise ApiError(400, "temperature and top_p must be finite numbers", "temperature")
    try:
        return SamplingParams(
            temperature=0.0 if temperature < GREEDY_BELOW else temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            top_k=max(0, request.top_k or 0), seed=request.seed, max_new_tokens=max_tokens,
            min_new_tokens=request.min_tokens, stop=stop, ignore_eos=request.ignore_eos, **structure,
        )
    except DossierError as err:
        raise ApiError(400, str(err)) from None


async def wait_finished(generation: Generation, backend, http_request) -> Finished:
    """The generation's result; if the client disconnects first, cancel it and raise CancelledError."""
    while True:
        try:  # the queue (not the events() generator, which a timeout would close) survives a timeout
            item = await asyncio.wait_for(generation.queue.get(), timeout=0.5)
        except TimeoutError:
            if await http_request.is_disconnected():
                backend.cancel(generation)
                raise asyncio.CancelledError from None
            continue
        except BaseException:
            backend.cancel(generation)
            raise
        if isinstance(item, Finished):
            return item


def check_finished(finished: Finished) -> None:
    """Raise a 500 for a generation that failed inside the engine (it never does for a valid request)."""
    if finished.reason.value == "error":
        raise ApiError(500, f"generation failed: {finished.error}")


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def sse(obj) -> str:
    """One server-sent event holding a JSON object (or the literal [DONE])."""
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


class TextDeltas:
    """Incremental detokenisation of a streamed reply.

    Args:
        processor: decodes token ids (special tokens skipped).
        stop: the request's stop strings (the end of the text that could start one is held back).
    """

    def __init__(self, processor, stop: list[str]) -> None:
        self.processor = processor
        self.stop = stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.decoder = IncrementalDetokenizer(processor.decode)
        self.scan = StopScan(stop)
        self.text = ""  # decoded so far (complete characters only), up to the first stop string
        self.stopped = False  # a stop string was found: the text is final
        self.sent = 0  # characters already released

    def add(self, token_ids: list[int]) -> str:
        """Take new tokens; return the text that became certain."""
        if self.stopped:  # the tokens after a stop string are never shown
            return ""
        piece = self.decoder.add(token_ids)
        if not piece:  # a character split across tokens (or special tokens only): nothing new
            return ""
        cut = self.scan.feed(piece)
        self.text += piece  # a copy, but no decoding: the per-token cost is a memcpy, not the tokenizer
        if cut is not None:  # the token that completed a stop string arrives before the finish
            self.text, self.stopped = self.text[:cut], True
        upto = max(self.sent, len(self.text) - (0 if self.stopped else self.hold))
        out, self.sent = self.text[self.sent:upto], upto
        return out

    def visible(self) -> str:
        """All text that may be shown now (for the tool-call parser, which holds back on its own)."""
        return self.text[: max(self.sent, len(self.text) - self.hold)]

    def finish(self, final_text: str) -> str:
        """The rest of the reply once it finished (`final_text` has any stop string cut off)."""
        piece = final_text[self.sent:]
        self.sent = len(final_text)
        return piece
