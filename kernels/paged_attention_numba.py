"""Decode attention on the CPU, reading K/V blocks in place through the block tables.

The SDPA reference path gathers every decoding sequence's blocks into a padded copy
before attending: on a CPU, where decode is bound by memory traffic, that reads the
KV cache three times (gather read, gather write, attention read). This kernel reads
each K and V row once. One task per (sequence, KV head) computes the scores of the
KV head's group of query heads, a softmax, and the weighted sum of values.

`paged_decode_jit_ready` is plain Python (the slow reference; `numba.prange` is
`range` outside numba); `paged_decode` is the same source compiled by numba, parallel
over tasks and cached on disk after the first compile (a few seconds). Parity with
the SDPA path: tests/engine/test_attention.py.
"""

import numpy as np
import torch

try:
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a core dependency
    njit = None
    prange = range

__all__ = ["available", "paged_decode", "paged_decode_jit_ready", "paged_decode_torch"]


def paged_decode_jit_ready(q, k_cache, v_cache, block_tables, kv_lens, kv_starts, scale, out):
    """q (B, kv_heads, group, D); caches (blocks, block_size, kv_heads, D); block_tables (B, max_blocks); out like q.

    Query b attends to cache rows kv_starts[b] .. kv_lens[b] - 1 (a start above 0: a sliding window).
    """
    batch, kv_heads, group, dim = q.shape
    block_size = k_cache.shape[1]
    for task in prange(batch * kv_heads):
        b = task // kv_heads
        h = task % kv_heads
        first = kv_starts[b]
        length = kv_lens[b] - first
        scores = np.empty((group, length), dtype=np.float32)
        for t in range(length):
            block = block_tables[b, (first + t) // block_size]
            slot = (first + t) % block_size
            for g in range(group):
                acc = np.float32(0.0)
                for d in range(dim):
                    acc += q[b, h, g, d] * k_cache[block, slot, h, d]
                scores[g, t] = acc * scale
        for g in range(group):
            peak = scores[g, 0]
            for t in range(1, length):
                peak = max(peak, scores[g, t])
            total = np.float32(0.0)
            for t in range(length):
                e = np.exp(scores[g, t] - peak)
                scores[g, t] = e
                total += e
            for t in range(length):
                scores[g, t] /= total
        acc_out = np.zeros((group, dim), dtype=np.float32)
        for t in range(length):
            block = block_tables[b, (first + t) // block_size]
            slot = (first + t) % block_size
            for g in range(group):
                p = scores[g, t]
                for d in range(dim):
                    acc_out[g, d] += p * v_cache[block, slot, h, d]
        for g in range(group):
            for d in range(dim):
                out[b, h, g, d] = acc_out[g, d]


paged_decode = njit(parallel=True, fastmath=True, cache=True)(paged_decode_jit_ready) if njit else None


def available() -> bool:
    """True when numba is installed (the kernel can be compiled)."""
    return paged_decode is not None


def paged_decode_torch(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, kv_lens: torch.Tensor,
    window: int | None = None,
) -> torch.Tensor:
    """Decode attention for float32 CPU tensors; q (B, kv_heads, group, D) -> same shape.

    `window`: attend only to the last `window` cache rows of each sequence (sliding-window layers).
    """
    if paged_decode is None:
        raise ImportError("the numba paged-decode kernel needs numba; install it with: pip install numba==0.68.1")
    assert q.dtype == k_cache.dtype == v_cache.dtype == torch.float32 and q.device.type == "cpu"
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and q.is_contiguous()
    out = torch.empty_like(q)
    scale = np.float32(q.shape[-1] ** -0.5)
    starts = torch.zeros_like(kv_lens) if window is None else (kv_lens - window).clamp(min=0)
    paged_decode(
        q.numpy(), k_cache.numpy(), v_cache.numpy(), block_tables.numpy(), kv_lens.numpy(), starts.numpy(), scale,
        out.numpy(),
    )
    return out
