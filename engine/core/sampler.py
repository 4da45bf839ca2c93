"""Next-token choice for every sampling row of a step: greedy, or temperature / top-k / top-p.

Greedy rows take the argmax (the first maximum, as HF `generate` does). Sampled rows are
drawn together, on the logits' device, in one path for the whole batch: temperature per
row, top-k by one `topk` at the largest k asked, top-p by one sort of the rows that ask for
it, then the exponential race (argmax of p / E with E ~ Exp(1), the same distribution as
drawing from p; Gumbel-max in another form). Only the race's noise is per row, each drawn
from its request's own seeded `torch.Generator` on that device, so a request's tokens do not
depend on what else is in the batch; nothing is copied to the host until the chosen ids are.
Structured-output masks and the min_new_tokens ban on stop tokens are applied to the logits
before either.

Tokens for a given seed changed with this path (it used to draw each row with a CPU
`torch.multinomial`); the distribution is the same.
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
    chosen = logits.argmax(dim=-1)
    rows = [i for i, request in enumerate(requests) if not request.sampling.greedy]
    if not rows:
        return chosen.tolist()
    index = torch.tensor(rows, device=logits.device)
    drawn, unusable = _draw(logits.index_select(0, index), [requests[i] for i in rows], chosen.index_select(0, index))
    chosen.index_copy_(0, index, drawn)
    out = chosen.tolist()  # the one copy to the host
    for row in (rows[j] for j, bad in enumerate(unusable.tolist()) if bad):
        # A temperature so small that logits / T overflow (1e-40 passes any positive check) gives NaN: such a
        # temperature means greedy, so this row kept its argmax and the other rows are untouched.
        log.warning("request %s: sampling probabilities not finite at temperature %g; took the greedy token",
                    requests[row].request_id, requests[row].sampling.temperature)
    return out


def _draw(logits: torch.Tensor, requests: list[Request], greedy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled ids of these rows (rows, vocab) and which rows fell back to `greedy` (non-finite probabilities)."""
    device, vocab = logits.device, logits.shape[-1]
    params = [request.sampling for request in requests]
    temperature = torch.tensor([p.temperature for p in params], dtype=logits.dtype, device=device)
    scaled = logits / temperature[:, None]
    top_k = [min(p.top_k, vocab) for p in params]
    if any(top_k):
        widest = max(top_k)
        values = torch.topk(scaled, widest, dim=-1).values  # (rows, widest), descending
        kth = values.gather(1, torch.tensor([[k - 1 if k else 0] for k in top_k], device=device))
        kth = kth.masked_fill(torch.tensor([[k == 0] for k in top_k], device=device), float("-inf"))
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    top_p = [p.top_p for p in params]
    if any(p < 1.0 for p in top_p):
        ordered, order = torch.sort(scaled, dim=-1, descending=True)
        probs = ordered.softmax(-1)
        limit = torch.tensor(top_p, dtype=probs.dtype, device=device)[:, None]
        outside = probs.cumsum(-1) - probs >= limit  # tokens after the nucleus is complete; rows at 1.0 keep all
        scaled = scaled.scatter(1, order, ordered.masked_fill(outside, float("-inf")))
    probs = scaled.softmax(-1)
    noise = torch.empty_like(probs)
    for row, request in enumerate(requests):
        noise[row].exponential_(generator=request.generator)
    noise.clamp_(min=torch.finfo(noise.dtype).tiny)
    drawn = (probs / noise).argmax(-1)
    unusable = ~(torch.isfinite(probs).all(-1) & (probs.sum(-1) > 0))
    return torch.where(unusable, greedy, drawn), unusable
