"""Attention over a paged KV cache: the plain PyTorch definition every fast path must equal.

Layout (shared with `engine/core/attention.py` and `kernels/paged_attention_triton.py`):
- `q`: (tokens, heads, head_dim), the query rows of many sequences laid end to end; sequence s
  owns rows `cu_seqlens_q[s]:cu_seqlens_q[s+1]` (a prefill chunk, or one decode token).
- `k_cache`, `v_cache`: (num_blocks, block_size, kv_heads, head_dim); token i of sequence s lives
  in block `block_tables[s, i // block_size]`, slot `i % block_size`. The chunk's own K/V are
  already written there, so prefix-cached blocks and fresh ones are read the same way.
- `context_lens[s]`: keys of sequence s after its chunk (cached + new). The chunk's queries are
  the last `q_len` positions of that context: query j may see keys 0..context - q_len + j
  (the causal mask aligned to the end, computed here from lengths: no mask tensor is passed).
- GQA: query head h reads KV head h // (heads // kv_heads).
- `window` > 0 (sliding-window layers): a query at position p sees keys p - window + 1 .. p.

The reference loops over sequences in float32 and is meant for tests, not speed.
"""

from __future__ import annotations

import torch

__all__ = ["paged_attention_reference", "check_paged_inputs"]


def check_paged_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                       context_lens: torch.Tensor, block_tables: torch.Tensor) -> None:
    """Shape and dtype contract shared by the reference and the kernels (internal invariants)."""
    assert q.ndim == 3, f"q must be (tokens, heads, head_dim), got {tuple(q.shape)}"
    assert k_cache.ndim == 4 and k_cache.shape == v_cache.shape, "caches must be (blocks, block_size, kv_heads, head_dim)"
    assert q.shape[2] == k_cache.shape[3], f"head_dim differs: q {q.shape[2]}, cache {k_cache.shape[3]}"
    assert q.shape[1] % k_cache.shape[2] == 0, f"{q.shape[1]} query heads are not a multiple of {k_cache.shape[2]} KV heads"
    assert q.dtype == k_cache.dtype == v_cache.dtype, f"dtypes differ: q {q.dtype}, k {k_cache.dtype}, v {v_cache.dtype}"
    seqs = context_lens.shape[0]
    assert cu_seqlens_q.shape == (seqs + 1,), f"cu_seqlens_q must have {seqs + 1} entries, got {tuple(cu_seqlens_q.shape)}"
    assert block_tables.ndim == 2 and block_tables.shape[0] == seqs, "block_tables must be (seqs, max_blocks)"
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("context_lens", context_lens), ("block_tables", block_tables)):
        assert t.dtype in (torch.int32, torch.int64), f"{name} must be int32 or int64, got {t.dtype}"


def paged_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              cu_seqlens_q: torch.Tensor, context_lens: torch.Tensor, block_tables: torch.Tensor,
                              scale: float | None = None, window: int = 0,
                              image_spans: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of packed query chunks over their sequences' paged caches, in float32.

    Args:
        q: (tokens, heads, head_dim).
        k_cache, v_cache: (num_blocks, block_size, kv_heads, head_dim).
        cu_seqlens_q: (seqs + 1,) first query row of each sequence, then the total.
        context_lens: (seqs,) keys of each sequence after its chunk.
        block_tables: (seqs, max_blocks) KV block ids (entries past a sequence's blocks are ignored).
        scale: softmax scale (default head_dim ** -0.5).
        window: sliding window in tokens (0: none).
        image_spans: (2, tokens) per row its image's [start, end) in its sequence (0, 0 for text rows): an image
            row also sees every key of its image, within the window (a sliding-window layer), as HF's Gemma-3 masks:
            full layers OR(causal, same image), sliding ones AND(window, OR(causal, same image)); None: causal.

    Returns:
        (tokens, heads, head_dim) in q's dtype.
    """
    check_paged_inputs(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_tables)
    tokens, heads, head_dim = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = heads // kv_heads
    scale = head_dim ** -0.5 if scale is None else scale
    out = torch.zeros(tokens, heads, head_dim, dtype=torch.float32, device=q.device)
    cu = cu_seqlens_q.tolist()
    for s, context in enumerate(context_lens.tolist()):
        lo, hi = cu[s], cu[s + 1]
        q_len = hi - lo
        if q_len == 0:
            continue
        assert q_len <= context, f"sequence {s}: {q_len} queries but only {context} keys"
        blocks = block_tables[s, : -(-context // block_size)].long()
        keys = k_cache[blocks].flatten(0, 1)[:context].float()  # (context, kv_heads, head_dim)
        values = v_cache[blocks].flatten(0, 1)[:context].float()
        keys = keys.repeat_interleave(group, dim=1).transpose(0, 1)  # (heads, context, head_dim)
        values = values.repeat_interleave(group, dim=1).transpose(0, 1)
        queries = q[lo:hi].float().transpose(0, 1)  # (heads, q_len, head_dim)
        scores = queries @ keys.transpose(1, 2) * scale  # (heads, q_len, context)
        query_pos = torch.arange(context - q_len, context, device=q.device)[:, None]  # (q_len, 1)
        key_pos = torch.arange(context, device=q.device)[None, :]  # (1, context)
        visible = key_pos <= query_pos
        if image_spans is not None:  # the same image: seen both ways (then the window, as HF's Gemma-3 masks)
            image_lo, image_hi = image_spans[0, lo:hi, None], image_spans[1, lo:hi, None]
            visible |= (key_pos >= image_lo) & (key_pos < image_hi)
        if window > 0:
            visible &= key_pos > query_pos - window
        scores = scores.masked_fill(~visible, float("-inf"))
        out[lo:hi] = (scores.softmax(-1) @ values).transpose(0, 1)
    return out.to(q.dtype)
