"""Next-token choice for every sampling row of a step: greedy, or temperature / top-k / top-p.

Greedy rows take the argmax (the first maximum, as HF `generate` does). Sampled rows
use their request's own seeded `torch.Generator`, so a request's tokens do not depend
on what else is in the batch. Structured-output masks and the min_new_tokens ban on
stop tokens are applied to the logits before either.
"""

import logging

import torch

from engine.core.request import Request
from engine.core.structured import GrammarCache

__all__ = ["sample"]

log = logging.getLogger(__name__)


def sample(logits: torch.Tensor, requests: list[Request], stop_token_ids: set[int], grammars: GrammarCache | None) -> list[int]:
    """Choose one token per row of `logits` (rows, vocab) float32, row i for `requests[i]`."""
    constrained = [i for i, r in enumerate(requests) if r.matcher is not None]
    if constrained:
        assert grammars is not None
        grammars.mask(logits, constrained, [requests[i].matcher for i in constrained])
    for i, request in enumerate(requests):
        params = request.sampling
        if len(request.output_token_ids) < params.min_new_tokens:
            banned = sorted(stop_token_ids | set(params.stop_token_ids))
            logits[i, banned] = float("-inf")
    chosen = logits.argmax(dim=-1).tolist()
    for i, request in enumerate(requests):
        if not request.sampling.greedy:
            chosen[i] = _sample_row(logits[i], request, chosen[i])
    return chosen


def _sample_row(row: torch.Tensor, request: Request, greedy: int) -> int:
    params = request.sampling
    row = row / params.temperature
    if params.top_k:
        kth = torch.topk(row, min(params.top_k, row.numel())).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(row, descending=True)
        probs = sorted_logits.softmax(-1)
        outside = probs.cumsum(-1) - probs >= params.top_p  # tokens after the nucleus is complete
        row = row.clone()
        row[order[outside]] = float("-inf")
    probs = row.softmax(-1).cpu()
    if not torch.isfinite(probs).all() or not probs.sum() > 0:
        # A temperature so small that logits / T overflow (1e-40 passes any positive check) gives NaN here, and
        # torch.multinomial would raise inside the step and fail every request in it. Such a temperature means
        # greedy: this row takes the argmax it already has, and the other rows are untouched.
        log.warning("request %s: sampling probabilities not finite at temperature %g; taking the greedy token",
                    request.request_id, params.temperature)
        return greedy
    return int(torch.multinomial(probs, 1, generator=request.generator).item())
