"""Gated DeltaNet on the CPU: the chunked form for prefill, the recurrent step for decode, and the causal conv.

Qwen3.5's linear-attention layers (three of every four) keep, per sequence and head, a state S (key dim x
value dim) instead of a growing KV cache. Token t (query q, key k, value v, log-decay g <= 0, rate beta):

    S' = exp(g) S ;  u = beta (v - S'^T k) ;  S = S' + k u^T ;  o = S^T q

with q and k L2-normalised and q scaled by 1/sqrt(key dim) (`prepare`). `recurrent_step` does exactly
that for one token of each of B sequences (decode). `chunked` does a sequence's tokens in chunks of C
(prefill), as the DeltaNet papers derive it: inside a chunk, with cumulative log-decay G_t and the
chunk's starting state S0, the corrections u solve one unit lower-triangular system,

    (I + A) u = beta (v - exp(G) k S0),   A_tj = beta_t exp(G_t - G_j) (k_t . k_j)  for j < t,

so u = W - Z S0 with W, Z solved for every chunk at once, independent of the state; then a short scan
over chunks carries S:  o = exp(G) q S0 + ((q k^T) o exp(G_t - G_j), j <= t) u,
S_end = exp(G_C) S0 + (k exp(G_C - G))^T u. Everything is float32, whatever the model's dtype.

A prefill split into several calls (chunked prefill, a session's next turn) passes each call's final
state to the next: the same recurrence, so the same values up to float rounding (not the same bits: the
chunk boundaries move with the split). transformers' `torch_chunk_gated_delta_rule` and
`torch_recurrent_gated_delta_rule` (models/qwen3_5) are the parity reference in the tests; on CUDA the
fla-core kernels are the field's implementation (not wired here yet; what runs of them under the Triton interpreter:
docs/cli.md, "Hybrid models").

The causal depthwise convolution in front of it (`causal_conv1d`) keeps the last kernel-1 inputs of a
sequence as its state, so it too resumes across calls.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["prepare", "chunked", "recurrent_step", "causal_conv1d", "causal_conv1d_step", "CHUNK"]

CHUNK = 64  # tokens a chunk solves at once (the triangular system is CHUNK x CHUNK per head)


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def prepare(q: torch.Tensor, k: torch.Tensor, value_heads: int, l2norm: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k in float32, each key head repeated for its group of value heads, normalised, q scaled.

    Args:
        q, k: [..., key heads, key dim].
        value_heads: the value heads (a multiple of the key heads).
        l2norm: normalise q and k to unit length (Qwen3.5 does).
    """
    group = value_heads // q.shape[-2]
    q, k = q.float(), k.float()
    if group > 1:
        q, k = q.repeat_interleave(group, dim=-2), k.repeat_interleave(group, dim=-2)
    if l2norm:
        q, k = _l2norm(q), _l2norm(k)
    return q * q.shape[-1] ** -0.5, k


def recurrent_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                   state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of each of B sequences (decode).

    Args:
        q, k: [B, H, Dk] from `prepare`; v: [B, H, Dv]; g, beta: [B, H]; state: [B, H, Dk, Dv] (float32).

    Returns:
        (output [B, H, Dv] float32, the new state [B, H, Dk, Dv]); `state` is not modified.
    """
    state = state * g.float().exp()[..., None, None]
    read = torch.einsum("bhkv,bhk->bhv", state, k)
    correction = (v.float() - read) * beta.float()[..., None]
    state = state + k[..., :, None] * correction[..., None, :]
    return torch.einsum("bhkv,bhk->bhv", state, q), state


def chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
            state: torch.Tensor | None = None, chunk: int = CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """A sequence's T tokens (prefill), starting from `state` (zeros when None).

    Args:
        q, k: [T, H, Dk] from `prepare`; v: [T, H, Dv]; g, beta: [T, H]; state: [H, Dk, Dv].
        chunk: tokens per chunk.

    Returns:
        (outputs [T, H, Dv] float32, the final state [H, Dk, Dv] float32).
    """
    length, heads, key_dim = k.shape
    value_dim = v.shape[-1]
    device = k.device  # everything below on the inputs' device (a CUDA run of this reference too)
    s = torch.zeros(heads, key_dim, value_dim, device=device) if state is None else state.float()
    if length == 0:
        return v.new_zeros(0, heads, value_dim, dtype=torch.float32), s
    pad = (-length) % chunk
    # heads first, then [chunks, chunk, ...]; padded tokens have k = v = beta = 0 and g = 0: they change nothing
    q, k, v = (F.pad(x.float().transpose(0, 1), (0, 0, 0, pad)).reshape(heads, -1, chunk, x.shape[-1])
               for x in (q, k, v))
    g, beta = (F.pad(x.float().transpose(0, 1), (0, pad)).reshape(heads, -1, chunk) for x in (g, beta))
    cum = g.cumsum(-1)  # G_t, per chunk
    below = torch.ones(chunk, chunk, dtype=torch.bool, device=device).tril()  # j <= t
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~below, float("-inf")).exp()  # exp(G_t - G_j)
    strictly = decay.masked_fill(torch.eye(chunk, dtype=torch.bool, device=device), 0.0)
    system = torch.eye(chunk, device=device) + beta[..., :, None] * (k @ k.transpose(-1, -2)) * strictly  # I + A
    rhs = torch.cat([beta[..., None] * v, (beta * cum.exp())[..., None] * k], dim=-1)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    w, z = solved[..., :value_dim], solved[..., value_dim:]  # u = w - z S0
    scores = (q @ k.transpose(-1, -2)) * decay  # (q_t . k_j) exp(G_t - G_j), j <= t
    q_decayed = q * cum.exp()[..., None]
    k_to_end = k * (cum[..., -1:] - cum).exp()[..., None]
    end_decay = cum[..., -1].exp()
    out = torch.empty(heads, q.shape[1], chunk, value_dim, device=device)
    for c in range(q.shape[1]):
        u = w[:, c] - z[:, c] @ s
        out[:, c] = q_decayed[:, c] @ s + scores[:, c] @ u
        s = end_decay[:, c, None, None] * s + k_to_end[:, c].transpose(-1, -2) @ u
    return out.reshape(heads, -1, value_dim)[:, :length].transpose(0, 1), s


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  state: torch.Tensor | None = None, activation: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal convolution over a sequence's T new inputs, continuing from `state`.

    Args:
        x: [T, channels]; weight: [channels, width]; bias: [channels] or None.
        state: the previous width-1 inputs [channels, width-1] (zeros when None: the sequence's start).
        activation: apply SiLU (Qwen3.5's linear layers do).

    Returns:
        (outputs [T, channels] in x's dtype, the new state [channels, width-1]).
    """
    channels, width = weight.shape
    if state is None:
        state = x.new_zeros(channels, width - 1)
    window = torch.cat([state.to(x.dtype), x.transpose(0, 1)], dim=-1)  # [channels, width-1+T]
    out = F.conv1d(window[None].to(weight.dtype), weight[:, None, :], bias, groups=channels)[0]
    if activation:
        out = F.silu(out)
    return out.transpose(0, 1).to(x.dtype), window[:, window.shape[-1] - (width - 1):].clone()


def causal_conv1d_step(x: torch.Tensor, weight: torch.Tensor, states: torch.Tensor,
                       activation: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """One new input of each of B sequences (decode), in one call instead of B `causal_conv1d` calls.

    Args:
        x: [B, channels]; weight: [channels, width]; states: [B, channels, width-1], each sequence's previous inputs.

    Returns:
        (outputs [B, channels] in x's dtype, the new states [B, channels, width-1]).
    """
    window = torch.cat([states.to(x.dtype), x[:, :, None]], dim=-1)  # [B, channels, width]
    out = (window.to(weight.dtype) * weight).sum(-1)
    if activation:
        out = F.silu(out)
    return out.to(x.dtype), window[:, :, 1:].clone()
