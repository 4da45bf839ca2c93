"""Prefill attention over a cached context in bf16 on CPUs with AVX512-BF16 and no AMX (AMD Zen 4/5).

A turn of an agent's conversation is a prefill chunk of a few dozen to a few hundred tokens over a context of
thousands, cached. torch's CPU flash kernel runs it at ~135 GFLOPS on two AMD EPYC Zen 5 cores: it has no AMX
tiles there and widens bf16 to float32 for its dot products, while the same CPU multiplies bf16 pairs into
float32 sums (`vdpbf16ps`) at ~750 GFLOPS in oneDNN's matmul. torch's bf16 matmul cannot stand in: its output
is bf16, and scores rounded to bf16 gave 3x the flash kernel's error. In a SmolLM2 serve step of 90 prompt rows
over 1,400 cached tokens this attention was 63 % of the step, the linears 23 %.

This kernel multiplies with `vdpbf16ps` itself, through the numba intrinsic `kernels.bf16_dot.dot_tile`: a tile
of `ROWS` rows times 16 x `lanes` columns kept in registers over a run of bf16 pairs. The arithmetic is the flash
kernel's: products of bf16 values summed in float32, a float32 softmax, the probabilities rounded to bf16 (round
to nearest even) for the weighted sum of values, accumulated in float32 and divided by the row's sum at the end.

Layout (`_pack` reads K and V from the paged cache into it once per call; a pair is two bf16 values in one int32,
the lower address low, as the instruction reads them):
- queries (kv_heads, rows, D/2): a KV head's query heads stacked (group x chunk length rows);
- keys (kv_heads, D/2, keys): pairs along the head dimension, keys across 16 lanes;
- values (kv_heads, keys/2, D): pairs of consecutive keys, the head dimension across lanes;
each row sees its first `row_keys[row]` keys (the cached context and its chunk up to itself), so the chunk's
own causal part needs no second call.

One task per (KV head, tile of `ROWS` rows), parallel over tasks. The first call compiles it (3.7 s on the Zen 5),
cached on disk after. `available()` is `kernels.bf16_dot.available()`:
False without numba, without AVX512-BF16 (the instruction would not compile) or with AMX; the caller keeps torch's
flash kernel there. Parity: tests/engine/test_bf16_dot_attention.py; timing:
benchmarks/bench_attention.py.
"""

from __future__ import annotations

import numpy as np
import torch

from kernels import bf16_dot

if bf16_dot.available():
    from numba import njit, prange

__all__ = ["ROWS", "available", "continued_prefill_bf16", "paged_prefill_bf16"]

ROWS = 6  # query rows per tile: 6 x 2 (scores) or 6 x 4 (values) float32 vectors of 16, within 32 registers
KEY_TILE = 32  # keys per scores tile: two vectors of 16 lanes
_AVAILABLE = bf16_dot.available()


def available() -> bool:
    """True where the kernel compiles for this CPU and is the faster path (AVX512-BF16, no AMX)."""
    return _AVAILABLE


if _AVAILABLE:
    _scores_tile = bf16_dot.dot_tile(ROWS, KEY_TILE // 16)
    _values_tile = bf16_dot.dot_tile(ROWS, 4)  # 64 output columns per call

    from kernels.paged_attention_numba import _exp_shifted

    @njit(parallel=True, fastmath=True, cache=True)
    def _attend(queries, keys, values, row_keys, scale, out):  # pragma: no cover - compiled
        """queries (H, R, D/2), keys (H, D/2, K), values (H, K/2, D) int32 pairs; row_keys (R,); out (H, R, D) f32.

        R is a multiple of ROWS, K of KEY_TILE, D of 64; row_keys[r] <= K, >= 1.
        """
        heads, rows, half = queries.shape
        dim, key_count = 2 * half, keys.shape[2]
        tiles = rows // ROWS
        q_flat, k_flat, v_flat = queries.reshape(-1), keys.reshape(-1), values.reshape(-1)
        for task in prange(heads * tiles):
            h, first = task // tiles, (task % tiles) * ROWS
            seen = 0
            for r in range(ROWS):
                seen = max(seen, row_keys[first + r])
            width = -(-seen // KEY_TILE) * KEY_TILE  # keys this tile computes scores for
            scores = np.empty((ROWS, width), dtype=np.float32)
            s_flat = scores.reshape(-1)
            for key in range(0, width, KEY_TILE):
                _scores_tile(q_flat, (h * rows + first) * half, half, k_flat, h * half * key_count + key, key_count,
                             s_flat, key, width, half)
            bits = np.empty(width, dtype=np.int32)
            weights = np.zeros((ROWS, width // 2), dtype=np.int32)  # bf16 pairs of unnormalised probabilities
            totals = np.empty(ROWS, dtype=np.float32)
            for r in range(ROWS):
                n = row_keys[first + r]
                peak = scores[r, 0]
                for t in range(1, n):
                    peak = max(peak, scores[r, t])
                _exp_shifted(scores[r], bits, n, peak, scale)
                total = np.float32(0.0)
                for t in range(n):
                    total += scores[r, t]
                totals[r] = total
                for t in range(n, width):
                    scores[r, t] = np.float32(0.0)
                as_bits = scores[r].view(np.uint32)
                for p in range(width // 2):  # round to nearest even, two to a pair (the lower key low)
                    low, high = as_bits[2 * p], as_bits[2 * p + 1]
                    low = (low + np.uint32(0x7FFF) + ((low >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
                    high = (high + np.uint32(0x7FFF) + ((high >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
                    weights[r, p] = np.int32(low | (high << np.uint32(16)))
            summed = np.empty((ROWS, dim), dtype=np.float32)
            w_flat, o_flat = weights.reshape(-1), summed.reshape(-1)
            for column in range(0, dim, 64):
                _values_tile(w_flat, 0, width // 2, v_flat, h * (key_count // 2) * dim + column, dim,
                             o_flat, column, dim, width // 2)
            for r in range(ROWS):
                inverse = np.float32(1.0) / totals[r]
                for d in range(dim):
                    out[h, first + r, d] = summed[r, d] * inverse


if _AVAILABLE:
    @njit(parallel=True, cache=True)
    def _pack(k_pairs, v_halves, block_table, kv_len, keys, values):  # pragma: no cover - compiled
        """The context's K and V from the paged cache into `_attend`'s layouts (zeros past kv_len).

        k_pairs (blocks, block_size, H, D/2) int32 and v_halves (blocks, block_size, H, D) uint16 views of the
        caches; keys (H, D/2, K) int32; values (H, K/2, D) int32 with K >= kv_len, a multiple of KEY_TILE.
        """
        block_size, heads, half = k_pairs.shape[1], k_pairs.shape[2], k_pairs.shape[3]
        key_count, dim = keys.shape[2], v_halves.shape[3]
        for task in prange(heads * (key_count // 2)):
            h, pair = task // (key_count // 2), task % (key_count // 2)
            for j in range(2 * pair, 2 * pair + 2):
                if j < kv_len:
                    block, slot = block_table[j // block_size], j % block_size
                    for p in range(half):
                        keys[h, p, j] = k_pairs[block, slot, h, p]
                else:
                    for p in range(half):
                        keys[h, p, j] = 0
            low_key, high_key = 2 * pair, 2 * pair + 1
            if high_key < kv_len:
                b0, s0 = block_table[low_key // block_size], low_key % block_size
                b1, s1 = block_table[high_key // block_size], high_key % block_size
                for d in range(dim):
                    values[h, pair, d] = np.int32(np.uint32(v_halves[b0, s0, h, d])
                                                  | (np.uint32(v_halves[b1, s1, h, d]) << np.uint32(16)))
            elif low_key < kv_len:
                b0, s0 = block_table[low_key // block_size], low_key % block_size
                for d in range(dim):
                    values[h, pair, d] = np.int32(v_halves[b0, s0, h, d])
            else:
                for d in range(dim):
                    values[h, pair, d] = 0


def paged_prefill_bf16(queries: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       block_table: torch.Tensor, kv_len: int) -> torch.Tensor:
    """A chunk's causal attention over its cached context and itself, read from the paged bf16 cache.

    Args:
        queries: (heads, length, D) bf16, the chunk's queries (the last `length` of the context's kv_len positions).
        k_cache, v_cache: (blocks, block_size, kv_heads, D) bf16, holding the chunk's own K/V already.
        block_table: (>= ceil(kv_len / block_size),) int64, the sequence's blocks in order.
        kv_len: tokens in the context, the chunk included.

    Returns:
        (heads, length, D) bf16: row i sees keys 0 .. kv_len - length + i.
    """
    if not _AVAILABLE:
        raise RuntimeError("the bf16 prefill kernel needs AVX512-BF16 without AMX and numba compiling for this CPU; "
                           "check kernels.prefill_attention_bf16.available() first")
    heads, length, dim = queries.shape
    kv_heads = k_cache.shape[2]
    assert queries.dtype == k_cache.dtype == v_cache.dtype == torch.bfloat16 and dim % 64 == 0
    assert heads % kv_heads == 0 and k_cache.is_contiguous() and v_cache.is_contiguous() and length <= kv_len
    group, cached = heads // kv_heads, kv_len - length
    rows = group * length
    padded_rows, padded_keys = -(-rows // ROWS) * ROWS, -(-kv_len // KEY_TILE) * KEY_TILE
    grouped = torch.zeros(kv_heads, padded_rows, dim, dtype=torch.bfloat16)
    grouped[:, :rows] = queries.reshape(kv_heads, rows, dim)  # a KV head's query heads stacked: row = g * length + i
    keys = np.empty((kv_heads, dim // 2, padded_keys), dtype=np.int32)
    values = np.empty((kv_heads, padded_keys // 2, dim), dtype=np.int32)
    _pack(k_cache.view(torch.int32).numpy(), v_cache.view(torch.int16).numpy().view(np.uint16),
          block_table.numpy(), kv_len, keys, values)
    row_keys = np.full(padded_rows, kv_len, dtype=np.int64)  # padded rows: any count, their output is dropped
    row_keys[:rows] = cached + 1 + np.tile(np.arange(length), group)
    out = torch.empty(kv_heads, padded_rows, dim, dtype=torch.float32)
    _attend(grouped.view(torch.int32).numpy(), keys, values, row_keys, np.float32(dim ** -0.5), out.numpy())
    return out[:, :rows].reshape(heads, length, dim).to(torch.bfloat16)


def continued_prefill_bf16(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """As `paged_prefill_bf16` over a gathered context: keys and values (kv_heads, kv_len, D) bf16."""
    kv_len = keys.shape[1]
    as_cache = lambda t: t.transpose(0, 1).unsqueeze(0).contiguous()  # one block of kv_len slots
    return paged_prefill_bf16(queries, as_cache(keys), as_cache(values), torch.zeros(1, dtype=torch.int64), kv_len)
