"""The vision tower's attention as one variable-length call over all the images and windows of an encode.

transformers runs a vision tower's attention window by window unless a flash-attention implementation is
asked for: `lengths.tolist()` (a device sync), then one SDPA call per window (Qwen2.5-VL: dozens per page).
Registered under a name containing "flash", this function is what the towers call instead, once, with
the windows' `cu_seq_lens_q` (the towers pass them only to implementations whose name says flash):

  - with flash-attn installed and fp16/bf16 tensors on a GPU: `flash_attn_varlen_func`, as the towers'
    own flash path does;
  - otherwise: the windows padded to the longest into one batch and one SDPA call with a key-padding mask
    (the block-diagonal layout): the same arithmetic as the per-window calls, without the loop.

`tests/vlm/test_tower_attention.py` compares the towers of every vision family against transformers'
own SDPA tower.
"""

from __future__ import annotations

import importlib.util

import torch
import torch.nn.functional as F

__all__ = ["TOWER_ATTENTION", "register_tower_attention", "varlen_attention"]

TOWER_ATTENTION = "dossier_flash_varlen"  # "flash" in the name: the towers then pass cu_seqlens in one call


def varlen_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask=None,
                     scaling: float | None = None, dropout: float = 0.0, cu_seq_lens_q: torch.Tensor | None = None,
                     max_length_q: int | None = None, is_causal: bool = False, **kwargs) -> tuple[torch.Tensor, None]:
    """Non-causal attention within each window of `cu_seq_lens_q`.

    Args:
        query, key, value: (1, heads, tokens, head_dim), every window's tokens one after another.
        cu_seq_lens_q: (windows + 1,) int32 first token of each window.

    Returns:
        ((1, tokens, heads, head_dim), None), as transformers' attention functions return.
    """
    assert not is_causal and dropout == 0.0, "the vision towers attend without a mask and without dropout"
    if cu_seq_lens_q is None:  # one window: every token sees every other
        out = F.scaled_dot_product_attention(query, key, value, scale=scaling)
        return out.transpose(1, 2), None
    _, heads, tokens, dim = query.shape
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (tokens, heads, dim)
    cu = cu_seq_lens_q.to(torch.int64)
    lengths = cu[1:] - cu[:-1]
    longest = int(max_length_q) if max_length_q is not None else int(lengths.max())
    if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) and importlib.util.find_spec("flash_attn"):
        from flash_attn import flash_attn_varlen_func

        out = flash_attn_varlen_func(q, k, v, cu_seq_lens_q.to(torch.int32), cu_seq_lens_q.to(torch.int32), longest,
                                     longest, softmax_scale=scaling, causal=False)
        return out.unsqueeze(0), None
    windows = lengths.numel()
    window_of = torch.repeat_interleave(torch.arange(windows, device=q.device), lengths)  # (tokens,)
    slot = torch.arange(tokens, device=q.device) - cu[window_of]  # position within its window
    padded = [t.new_zeros(windows, longest, heads, dim).index_put_((window_of, slot), t) for t in (q, k, v)]
    visible = (torch.arange(longest, device=q.device)[None, :] < lengths[:, None])[:, None, None, :]
    out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in padded), attn_mask=visible, scale=scaling)
    return out.transpose(1, 2)[window_of, slot].unsqueeze(0), None  # (1, tokens, heads, dim)


def register_tower_attention() -> str:
    """Register `varlen_attention` with transformers (once; idempotent) and return its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(TOWER_ATTENTION, varlen_attention)
    return TOWER_ATTENTION
