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

bf16 caches (`paged_decode_bf16`): numba has no bf16 type, so the caches arrive as their uint16
bit patterns (a view, no copy). A bf16 value is the upper half of a float32, so each K or V row
is widened once into a float32 scratch row (`bits << 16`, read through a float32 view of the same
memory) and every product, sum and softmax runs in float32; q is widened and the output rounded to
bf16 by torch (both are one row per query head). The cache itself is never converted: decode reads
half the bytes of float32. Rows go eight at a time (see `paged_decode_bf16_jit_ready`); a first,
one-row-at-a-time version was 0.87-0.88x bf16 SDPA at batch 1 x 2048 and 8 x 512 (median of 7, same
machine and load), too slow for `auto`.

Measured (2026-12-02) on an Intel Xeon with avx512_bf16 and AMX, 2 cores, 2 threads, torch 2.14.1,
numba 0.68.1: one layer's decode attention at Qwen2.5-1.5B's shapes (12 query heads, 2 KV heads,
head dim 128, blocks of 16, scattered block tables), through the backends' `forward` (SDPA's
includes its gather), ms per call, the least-disturbed of 9 interleaved samples, range over three
runs (the machine was shared: load average ~3.6-3.9 from other jobs; SDPA at 8 x 2048 varied most).
A decode step of the 1.5B is 28 such calls.

    batch x context   sdpa bf16     numba bf16    numba fp32    sdpa fp32     sdpa bf16 / numba bf16
    1 x 512           0.258-0.279   0.216-0.242   0.236-0.241   0.356-0.393   1.09-1.28x
    1 x 2048          0.673-0.794   0.595-0.649   0.666-0.896   1.099-1.247   1.13-1.22x
    8 x 512           1.260-1.323   1.228-1.285   1.370-1.607   1.636-2.126   1.03-1.04x
    8 x 2048          6.537-22.66   5.195-8.050   10.84-15.06   10.58-24.28   1.26-2.83x

So `attention_backend="auto"` takes this kernel for bf16 on the CPU (engine/core/attention.py).
"""

import numpy as np
import torch

try:
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a core dependency
    njit = None
    prange = range

__all__ = [
    "available", "paged_decode", "paged_decode_bf16", "paged_decode_bf16_jit_ready", "paged_decode_jit_ready",
    "paged_decode_torch",
]


def _softmax_rows_jit_ready(scores, rows, length, bits):
    """Softmax in place over the first `length` columns of each of the first `rows` rows (float32).

    exp is computed here, not by `np.exp`: numba calls libm's scalar expf once per element (no SVML in
    a pip install), which was a sixth of the float32 kernel's time at 8 x 2048 on an AVX2 EPYC. This is
    Cephes' expf (Cody-Waite reduction by ln 2 in two parts, a degree-5 polynomial on [-ln2/2, ln2/2],
    the power of two written as float bits into `bits`, an int32 scratch of >= `length`), all plain
    arithmetic that LLVM vectorises: relative error <= 8e-8 on [-87, 0] against float64, which is where
    the arguments lie (scores minus their row's peak); np.exp's float32 was 2e-7 there. Below -87 the
    result is 2^-126 times a tiny factor, as good as 0 beside the peak's 1.
    """
    for g in range(rows):
        peak = scores[g, 0]
        for t in range(1, length):
            peak = max(peak, scores[g, t])
        _exp_shifted(scores[g], bits, length, peak, np.float32(1.0))
        total = np.float32(0.0)
        for t in range(length):
            total += scores[g, t]
        inverse = np.float32(1.0) / total
        for t in range(length):
            scores[g, t] *= inverse


def _exp_shifted_jit_ready(row, bits, length, peak, scale):
    """row[t] = exp((row[t] - peak) * scale) in place for t < length (arguments <= 0), `_softmax_rows`'s expf."""
    values = bits.view(np.float32)
    for t in range(length):
        x = max((row[t] - peak) * scale, np.float32(-87.0))
        n = np.floor(x * np.float32(1.4426950408889634) + np.float32(0.5))
        r = x - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)
        p = np.float32(1.9875691500e-4)
        p = p * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        row[t] = p * (r * r) + r + np.float32(1.0)
        bits[t] = (np.int32(n) + np.int32(127)) << np.int32(23)
    for t in range(length):
        row[t] *= values[t]


_exp_shifted = njit(fastmath=True, cache=True, inline="always")(_exp_shifted_jit_ready) if njit else \
    _exp_shifted_jit_ready


# Both kernels call this one; numba inlines it into their loops, and the plain-Python kernels call it too.
_softmax_rows = njit(fastmath=True, cache=True, inline="always")(_softmax_rows_jit_ready) if njit else \
    _softmax_rows_jit_ready


def _hide_later_keys_jit_ready(scores, group, rows, length):
    """Rows folded into the group axis (`rows` > 1): query row r of `rows` sees the keys up to its own position, so
    its last rows - 1 - r scores are pushed to -1e30, which the softmax turns into weights below 2^-125."""
    per_row = group // rows
    for g in range(group):
        for t in range(length - (rows - 1 - g // per_row), length):
            scores[g, t] = np.float32(-1e30)


_hide_later_keys = njit(fastmath=True, cache=True, inline="always")(_hide_later_keys_jit_ready) if njit else \
    _hide_later_keys_jit_ready


def _store_eight_jit_ready(scores, g, t, scale, a0, a1, a2, a3, a4, a5, a6, a7):
    """Eight keys' dot products, scaled, as scores[g, t .. t + 7] (both kernels' eight-key tiles)."""
    scores[g, t] = a0 * scale
    scores[g, t + 1] = a1 * scale
    scores[g, t + 2] = a2 * scale
    scores[g, t + 3] = a3 * scale
    scores[g, t + 4] = a4 * scale
    scores[g, t + 5] = a5 * scale
    scores[g, t + 6] = a6 * scale
    scores[g, t + 7] = a7 * scale


_store_eight = njit(fastmath=True, cache=True, inline="always")(_store_eight_jit_ready) if njit else \
    _store_eight_jit_ready


def paged_decode_jit_ready(q, k_cache, v_cache, block_tables, kv_lens, kv_starts, scale, out, stacked):
    """q (B, kv_heads, group, D); caches (blocks, block_size, kv_heads, D); block_tables (B, max_blocks); out like q.

    Query b attends to cache rows kv_starts[b] .. kv_lens[b] - 1 (a start above 0: a sliding window).
    `stacked` > 1: entry b holds that many consecutive query rows of one sequence, row-major in the group axis
    (group = stacked x query heads per KV head); row r sees stacked - 1 - r keys fewer than the last
    (`_hide_later_keys`), so a reply's chunk with its draft tokens reads each key once for all its rows. Needs
    kv_starts 0.
    Keys go eight at a time where eight consecutive slots lie in one block (as the bf16 kernel's rows):
    each query head's eight dot products share one pass over its q row, each output row takes eight
    weighted values in one read-modify-write, and the block table is read once per eight keys. Other
    keys (a block's tail when the block size is not a multiple of 8, a window's unaligned start) go one
    at a time.
    """
    batch, kv_heads, group, dim = q.shape
    block_size = k_cache.shape[1]
    for task in prange(batch * kv_heads):
        b = task // kv_heads
        h = task % kv_heads
        first = kv_starts[b]
        length = kv_lens[b] - first
        scores = np.empty((group, length), dtype=np.float32)
        bits = np.empty(length, dtype=np.int32)
        t = 0
        while t < length:
            block = block_tables[b, (first + t) // block_size]
            slot = (first + t) % block_size
            if slot + 8 <= block_size and t + 8 <= length:
                for g in range(group):
                    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.float32(0.0)
                    for d in range(dim):
                        x = q[b, h, g, d]
                        a0 += x * k_cache[block, slot, h, d]
                        a1 += x * k_cache[block, slot + 1, h, d]
                        a2 += x * k_cache[block, slot + 2, h, d]
                        a3 += x * k_cache[block, slot + 3, h, d]
                        a4 += x * k_cache[block, slot + 4, h, d]
                        a5 += x * k_cache[block, slot + 5, h, d]
                        a6 += x * k_cache[block, slot + 6, h, d]
                        a7 += x * k_cache[block, slot + 7, h, d]
                    _store_eight(scores, g, t, scale, a0, a1, a2, a3, a4, a5, a6, a7)
                t += 8
            else:
                for g in range(group):
                    acc = np.float32(0.0)
                    for d in range(dim):
                        acc += q[b, h, g, d] * k_cache[block, slot, h, d]
                    scores[g, t] = acc * scale
                t += 1
        if stacked > 1:
            _hide_later_keys(scores, group, stacked, length)
        _softmax_rows(scores, group, length, bits)
        acc_out = np.zeros((group, dim), dtype=np.float32)
        t = 0
        while t < length:
            block = block_tables[b, (first + t) // block_size]
            slot = (first + t) % block_size
            if slot + 8 <= block_size and t + 8 <= length:
                for g in range(group):
                    p0, p1, p2, p3 = scores[g, t], scores[g, t + 1], scores[g, t + 2], scores[g, t + 3]
                    p4, p5, p6, p7 = scores[g, t + 4], scores[g, t + 5], scores[g, t + 6], scores[g, t + 7]
                    for d in range(dim):
                        acc_out[g, d] += (p0 * v_cache[block, slot, h, d] + p1 * v_cache[block, slot + 1, h, d]
                                          + p2 * v_cache[block, slot + 2, h, d] + p3 * v_cache[block, slot + 3, h, d]
                                          + p4 * v_cache[block, slot + 4, h, d] + p5 * v_cache[block, slot + 5, h, d]
                                          + p6 * v_cache[block, slot + 6, h, d] + p7 * v_cache[block, slot + 7, h, d])
                t += 8
            else:
                for g in range(group):
                    p = scores[g, t]
                    for d in range(dim):
                        acc_out[g, d] += p * v_cache[block, slot, h, d]
                t += 1
        for g in range(group):
            for d in range(dim):
                out[b, h, g, d] = acc_out[g, d]


paged_decode = njit(parallel=True, fastmath=True, cache=True)(paged_decode_jit_ready) if njit else None


def _widen_rows_jit_ready(cache_bits, block_tables, b, h, position, count, rows_bits):
    """rows_bits[r] = cache row position + r of sequence b, KV head h, as float32 bits (bf16 bits << 16), r < count."""
    block_size, dim = cache_bits.shape[1], cache_bits.shape[3]
    for r in range(count):
        block = block_tables[b, (position + r) // block_size]
        slot = (position + r) % block_size
        for d in range(dim):
            rows_bits[r, d] = np.uint32(cache_bits[block, slot, h, d]) << np.uint32(16)  # uint32: 32-bit lanes


_widen_rows = njit(fastmath=True, cache=True, inline="always")(_widen_rows_jit_ready) if njit else _widen_rows_jit_ready


def _weighted_values_bf16_jit_ready(scores, v_bits, block_tables, b, h, first, length, rows_bits, acc_out):
    """acc_out[g] += sum over t < length of scores[g, t] x V row first + t of sequence b, KV head h (bf16 bits).

    V rows are widened eight at a time into `rows_bits` (8, D) uint32 (its float32 view holds the values), and each
    output row takes the eight weighted values in one read-modify-write; the last length % 8 rows go one at a time.
    """
    group, dim = acc_out.shape
    rows = rows_bits.view(np.float32)
    t = 0
    while t < length:
        tile = 8 if t + 8 <= length else 1
        _widen_rows(v_bits, block_tables, b, h, first + t, tile, rows_bits)
        for g in range(group):
            if tile == 1:
                p = scores[g, t]
                for d in range(dim):
                    acc_out[g, d] += p * rows[0, d]
                continue
            p0, p1, p2, p3 = scores[g, t], scores[g, t + 1], scores[g, t + 2], scores[g, t + 3]
            p4, p5, p6, p7 = scores[g, t + 4], scores[g, t + 5], scores[g, t + 6], scores[g, t + 7]
            for d in range(dim):
                acc_out[g, d] += (p0 * rows[0, d] + p1 * rows[1, d] + p2 * rows[2, d] + p3 * rows[3, d]
                                  + p4 * rows[4, d] + p5 * rows[5, d] + p6 * rows[6, d] + p7 * rows[7, d])
        t += tile


_weighted_values_bf16 = njit(fastmath=True, cache=True, inline="always")(_weighted_values_bf16_jit_ready) if njit \
    else _weighted_values_bf16_jit_ready


def paged_decode_bf16_jit_ready(q, k_bits, v_bits, block_tables, kv_lens, kv_starts, scale, out, stacked):
    """As `paged_decode_jit_ready` over bf16 caches given as uint16 bits; q and out float32.

    Cache rows are widened to float32 eight at a time into `rows` (the float32 view of `rows_bits`),
    then each query head's eight dot products share one pass over its q row, and each head's output
    row takes the eight weighted values in one read-modify-write instead of eight. Hand-unrolled:
    eight scalars stay in registers, an array of eight partial sums would not. The sequence's last
    length % 8 rows go one at a time. 1.46-1.52x the one-row-at-a-time loop (one thread, 1 x 2048, 8 x 512).
    """
    batch, kv_heads, group, dim = q.shape
    for task in prange(batch * kv_heads):
        b = task // kv_heads
        h = task % kv_heads
        first = kv_starts[b]
        length = kv_lens[b] - first
        rows_bits = np.empty((8, dim), dtype=np.uint32)
        rows = rows_bits.view(np.float32)  # the same memory: bf16 bits << 16 is the float32 value
        scores = np.empty((group, length), dtype=np.float32)
        bits = np.empty(length, dtype=np.int32)
        t = 0
        while t < length:
            tile = 8 if t + 8 <= length else 1
            _widen_rows(k_bits, block_tables, b, h, first + t, tile, rows_bits)
            for g in range(group):
                if tile == 1:
                    acc = np.float32(0.0)
                    for d in range(dim):
                        acc += q[b, h, g, d] * rows[0, d]
                    scores[g, t] = acc * scale
                    continue
                a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.float32(0.0)
                for d in range(dim):
                    x = q[b, h, g, d]
                    a0 += x * rows[0, d]
                    a1 += x * rows[1, d]
                    a2 += x * rows[2, d]
                    a3 += x * rows[3, d]
                    a4 += x * rows[4, d]
                    a5 += x * rows[5, d]
                    a6 += x * rows[6, d]
                    a7 += x * rows[7, d]
                _store_eight(scores, g, t, scale, a0, a1, a2, a3, a4, a5, a6, a7)
            t += tile
        if stacked > 1:
            _hide_later_keys(scores, group, stacked, length)
        _softmax_rows(scores, group, length, bits)
        acc_out = np.zeros((group, dim), dtype=np.float32)
        _weighted_values_bf16(scores, v_bits, block_tables, b, h, first, length, rows_bits, acc_out)
        for g in range(group):
            for d in range(dim):
                out[b, h, g, d] = acc_out[g, d]


paged_decode_bf16 = njit(parallel=True, fastmath=True, cache=True)(paged_decode_bf16_jit_ready) if njit else None


def available() -> bool:
    """True when numba is installed (the kernel can be compiled)."""
    return paged_decode is not None


def paged_decode_torch(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, kv_lens: torch.Tensor,
    window: int | None = None, rows: int = 1,
) -> torch.Tensor:
    """Decode attention for float32 or bfloat16 CPU tensors; q (B, kv_heads, group, D) -> same shape and dtype.

    bfloat16 accumulates in float32 inside the kernel, reading the caches in place.
    `window`: attend only to the last `window` cache rows of each sequence (sliding-window layers).
    `rows`: each entry is that many consecutive query rows of one sequence folded into the group axis (row-major),
    kv_lens the last row's key count; each row sees the keys up to its own (no window then).
    """
    assert rows == 1 or window is None, "rows folded into one entry take no window"
    if paged_decode is None:
        raise ImportError("the numba paged-decode kernel needs numba; install it with: pip install numba==0.68.1")
    assert q.dtype == k_cache.dtype == v_cache.dtype and q.dtype in (torch.float32, torch.bfloat16)
    assert q.device.type == "cpu"
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and q.is_contiguous()
    scale = np.float32(q.shape[-1] ** -0.5)
    starts = torch.zeros_like(kv_lens) if window is None else (kv_lens - window).clamp(min=0)
    if q.dtype == torch.bfloat16:
        from kernels import decode_attention_bf16

        out = torch.empty(q.shape, dtype=torch.float32)
        v_bits = v_cache.view(torch.int16).numpy().view(np.uint16)  # the cache's own memory, no copy
        if decode_attention_bf16.applies(k_cache.shape[1], q.shape[-1], window):  # scores by vdpbf16ps
            decode_attention_bf16.paged_decode_bf16_dot(q.view(torch.int32).numpy(), k_cache.view(torch.int32).numpy(),
                                                        v_bits, block_tables.numpy(), kv_lens.numpy(), scale,
                                                        out.numpy(), rows)
            return out.to(torch.bfloat16)
        queries = q.float()  # (B, kv_heads, group, D): one row per query head, widened here
        k_bits = k_cache.view(torch.int16).numpy().view(np.uint16)
        paged_decode_bf16(queries.numpy(), k_bits, v_bits, block_tables.numpy(), kv_lens.numpy(), starts.numpy(),
                          scale, out.numpy(), rows)
        return out.to(torch.bfloat16)
    out = torch.empty_like(q)
    paged_decode(
        q.numpy(), k_cache.numpy(), v_cache.numpy(), block_tables.numpy(), kv_lens.numpy(), starts.numpy(), scale,
        out.numpy(), rows,
    )
    return out
