"""Decode attention over a paged bf16 cache whose scores use `vdpbf16ps` (AVX512-BF16, no AMX: AMD Zen 4/5).

`kernels/paged_attention_numba.py`'s bf16 kernel widens each K row to float32 and sums each key's products over
the head dimension in vector lanes, so every key pays a horizontal sum: on an AMD EPYC Zen 5 one SmolLM2 layer
at 8 sequences x 2,048 keys ran at 6-8 GB/s, and decode attention was half of a decode step. Here a key's
products are bf16 pairs summed into float32 lanes by `vdpbf16ps` straight from the cache (no widening), and 16
keys' lane vectors are summed together in four shuffle-and-add levels (`kernels.bf16_dot.key_tile`), so 16 keys
share 15 vector additions. The softmax is the other kernel's (`_softmax_rows`); the weighted sum of values stays
float32 (`kernels.bf16_dot.value_tile`: eight V rows widened in registers, each row's sums taking them by fused
multiply-adds), so outputs differ from the other kernel's only by the order of float32 additions.

Both passes ask for the K and V rows `PREFETCH_KEYS` keys ahead (a decode step reads every layer's cache from
memory, in scattered blocks).

Where it applies: `paged_decode_torch` takes it for bf16 caches without a sliding window, with blocks a multiple of
16 slots and a head dimension in `HEAD_DIMS`, on a CPU where `kernels.bf16_dot.available()`. A 16-key tile lies
in one block; a sequence's last tile reads the rest of its last block, whose scores are never used. The first call
compiles it (6.5 s on the Zen 5: four head sizes' unrolled tiles), cached on disk after (0.3 s to load). Parity:
tests/engine/test_bf16_dot_attention.py; timing: benchmarks/decode_profile.py.
"""

from __future__ import annotations

import numpy as np

from kernels import bf16_dot

__all__ = ["HEAD_DIMS", "applies", "paged_decode_bf16_dot"]


HEAD_DIMS = (32, 64, 128, 256)  # a query row is 1, 2, 4 or 8 vectors of 16 bf16 pairs
# Keys ahead whose K (scores) and V (values) rows are asked for while this tile computes: a sequence's blocks lie
# scattered in the pool, and its rows of one KV head are 64-256 bytes apart from the next head's, which the
# hardware prefetchers do not follow. At 8 x 2,048 over 30 layers' caches (so from memory, as in a decode step) one
# call took 1.12 ms without, 0.86-0.90 ms prefetching K and 0.45-0.58 ms prefetching both (16-192 keys ahead; a
# scratch timing on the Zen 5, where a plain streaming read runs ~40 GB/s).
PREFETCH_KEYS = 64


def applies(block_size: int, head_dim: int, window: int | None) -> bool:
    """Is this kernel the bf16 decode path for these caches on this CPU?"""
    return bf16_dot.available() and window is None and block_size % 16 == 0 and head_dim in HEAD_DIMS


if bf16_dot.available():
    from numba import njit, prange

    from kernels.bf16_dot import key_tile, prefetch, value_tile
    from kernels.paged_attention_numba import _hide_later_keys, _softmax_rows

    @njit(fastmath=True, cache=True, inline="always")
    def _key_scores(q_flat, q_start, k_flat, k_start, k_stride, s_flat, s_start, scale, half):  # pragma: no cover
        """16 keys' scores for one query row; the row's vector count is a constant in each branch."""
        if half == 16:
            key_tile(q_flat, q_start, k_flat, k_start, k_stride, s_flat, s_start, scale, 1)
        elif half == 32:
            key_tile(q_flat, q_start, k_flat, k_start, k_stride, s_flat, s_start, scale, 2)
        elif half == 64:
            key_tile(q_flat, q_start, k_flat, k_start, k_stride, s_flat, s_start, scale, 4)
        else:
            key_tile(q_flat, q_start, k_flat, k_start, k_stride, s_flat, s_start, scale, 8)

    @njit(fastmath=True, cache=True, inline="always")
    def _weighted_values(scores, v_flat, v_bits, block_table, h, length, acc_out):  # pragma: no cover - compiled
        """acc_out[g] += sum over t < length of scores[g, t] x V row t (bf16 bits), eight keys of a block at a time."""
        group, dim = acc_out.shape
        block_size, heads = v_bits.shape[1], v_bits.shape[2]
        half, width, stride = dim // 2, scores.shape[1], heads * dim
        s_flat, a_flat = scores.reshape(-1), acc_out.reshape(-1)
        for t in range(0, length - length % 8, 8):  # blocks hold a multiple of 16 slots: 8 keys share a block
            start = ((block_table[t // block_size] * block_size + t % block_size) * heads + h) * dim
            ahead = t + PREFETCH_KEYS
            if ahead + 8 <= length:
                a_start = ((block_table[ahead // block_size] * block_size + ahead % block_size) * heads + h) * dim
                for key in range(8):
                    for line in range(0, dim, 32):
                        prefetch(v_flat, a_start + key * stride + line)
            if half == 16:
                value_tile(v_flat, start, stride, s_flat, t, width, a_flat, dim, group, 2)
            elif half == 32:
                value_tile(v_flat, start, stride, s_flat, t, width, a_flat, dim, group, 4)
            elif half == 64:
                value_tile(v_flat, start, stride, s_flat, t, width, a_flat, dim, group, 8)
            else:
                value_tile(v_flat, start, stride, s_flat, t, width, a_flat, dim, group, 16)
        row_bits = np.empty(dim, dtype=np.uint32)
        row = row_bits.view(np.float32)  # bf16 bits << 16 are the float32 value
        for t in range(length - length % 8, length):
            block, slot = block_table[t // block_size], t % block_size
            for d in range(dim):
                row_bits[d] = np.uint32(v_bits[block, slot, h, d]) << np.uint32(16)
            for g in range(group):
                weight = scores[g, t]
                for d in range(dim):
                    acc_out[g, d] += weight * row[d]

    @njit(parallel=True, fastmath=True, cache=True)
    def paged_decode_bf16_dot(q_pairs, k_pairs, v_bits, block_tables, kv_lens, scale, out,
                              stacked):  # pragma: no cover - compiled
        """As `paged_decode_bf16` without a window (kv_starts 0), its scores by `vdpbf16ps`.

        q_pairs (B, kv_heads, group, D/2) int32 (the queries' bf16 pairs); k_pairs (blocks, block_size, kv_heads,
        D/2) int32 and v_bits (blocks, block_size, kv_heads, D) uint16 views of the caches; out (B, kv_heads, group,
        D) float32; `stacked` as there. D in HEAD_DIMS, block_size a multiple of 16.
        """
        batch, heads, group, half = q_pairs.shape
        dim, block_size = 2 * half, k_pairs.shape[1]
        q_flat, k_flat, v_flat = q_pairs.reshape(-1), k_pairs.reshape(-1), v_bits.reshape(-1)
        for task in prange(batch * heads):
            b, h = task // heads, task % heads
            length = kv_lens[b]
            width = -(-length // 16) * 16
            scores = np.empty((group, width), dtype=np.float32)
            s_flat = scores.reshape(-1)
            for t in range(0, width, 16):
                block = block_tables[b, t // block_size]
                k_start = ((block * block_size + t % block_size) * heads + h) * half
                ahead = t + PREFETCH_KEYS
                if ahead < width:
                    ahead_block = block_tables[b, ahead // block_size]
                    a_start = ((ahead_block * block_size + ahead % block_size) * heads + h) * half
                    for key in range(16):
                        for line in range(0, half, 16):
                            prefetch(k_flat, a_start + key * heads * half + line)
                for g in range(group):
                    _key_scores(q_flat, ((b * heads + h) * group + g) * half, k_flat, k_start, heads * half, s_flat,
                                g * width + t, scale, half)
            if stacked > 1:
                _hide_later_keys(scores, group, stacked, length)
            _softmax_rows(scores, group, length, np.empty(length, dtype=np.int32))
            acc_out = np.zeros((group, dim), dtype=np.float32)
            _weighted_values(scores, v_flat, v_bits, block_tables[b], h, length, acc_out)
            for g in range(group):
                for d in range(dim):
                    out[b, h, g, d] = acc_out[g, d]
else:
    def paged_decode_bf16_dot(*args, **kwargs):
        raise RuntimeError("the vdpbf16ps decode kernel needs AVX512-BF16 without AMX and numba compiling for this "
                           "CPU; check kernels.decode_attention_bf16.applies() first")
