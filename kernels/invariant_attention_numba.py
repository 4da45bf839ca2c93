"""Batch-invariant attention on the CPU: one kernel for every query row, prefill or decode (issue 48).

The deterministic mode (`EngineConfig.deterministic`) needs a row's attention output to depend only on
its own query and its sequence's cached keys and values: never on how many rows share the step, how its
prefill was chunked, or whether its prefix came from the cache. This kernel gets there by construction,
not by measurement:

- every sum is written as a loop in one fixed order (a score over d = 0..D-1; the softmax's peak and
  total, and the weighted sum of values, over keys start..position-1), with fastmath off, so the
  compiler may neither reassociate nor fuse a multiply and an add into an FMA. The loops that are
  vectorised run over independent outputs (all of a row's key scores for one d, the D output features
  for one key), which changes no element's arithmetic: IEEE float32 fixes each result bit for bit;
- the caches are widened to float32 (bf16: `bits << 16`, exact) and every product and sum is float32;
- work is split over (tile of query rows of one sequence, KV head): a prefill chunk's rows share each
  widened key tile (keys are read once per tile of rows, not once per row, the cost that made the mode's
  first version 4.75x slower at prefill), while a decode row is a tile of one. A row's arithmetic is the
  same in either: the tile only decides which rows share a widened key tile;
- the query heads of a GQA group are taken two at a time (`_two_queries`): both read each key and value
  once, and each output's additions are the ones `_one_query` makes, in its order (same bits: checked on
  12 shapes against the one-at-a-time kernel; 11-17 % faster at 300-1,200 rows on the AMX Xeon).

Because no step depends on the instruction set, the same bits come out on AVX2 and AVX-512 machines
(`expf` from the same libm assumed).

`rows_attention_jit_ready` is plain Python (the slow reference; `numba.prange` is `range` outside numba);
`rows_attention_torch` runs it compiled, parallel over tasks, cached on disk after the first compile.
Parity with SDPA and invariance: tests/engine/test_batch_invariance.py.

    from kernels.invariant_attention_numba import rows_attention_torch
    out = rows_attention_torch(q, k_cache, v_cache, block_tables, row_seq, kv_lens, tile_starts, window=None)
"""

import numpy as np
import torch

try:
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a core dependency
    njit = None
    prange = range

__all__ = ["QUERY_TILE", "query_tiles", "rows_attention_jit_ready", "rows_attention_torch"]

QUERY_TILE = 32  # prefill rows of one sequence sharing the keys and values the kernel widens


def rows_attention_jit_ready(q, k_bits, v_bits, shift, block_tables, row_seq, kv_lens, kv_starts, tile_starts,
                             scale, out):
    """Every query row over its own keys kv_starts[row] .. kv_lens[row] - 1; writes out (like q, float32).

    q (rows, kv_heads, group, D) float32. k_bits / v_bits: the caches (blocks, block_size, kv_heads, D) as
    raw bits, uint16 for bf16 (`shift` 16) or uint32 for float32 (`shift` 0). block_tables (seqs, max_blocks);
    row_seq (rows,) the sequence of each row. tile_starts (tiles + 1,): rows tile_starts[i] ..
    tile_starts[i + 1] - 1 form a tile, all of one sequence.

    Every vectorised loop runs over independent outputs: the scores of all the row's keys at once for one d
    (keys transposed to (D, keys)), and all D features of the weighted sum for one key (eight keys per pass,
    added in key order). numba leaves LLVM's SLP vectoriser off; its loop vectoriser needs no fastmath here.
    """
    rows, kv_heads, group, dim = q.shape
    block_size = k_bits.shape[1]
    tiles = tile_starts.shape[0] - 1
    for task in prange(tiles * kv_heads):
        order = task // kv_heads  # tiles in the order first, last, second, second-to-last, ...: numba splits the
        tile = order // 2 if order % 2 == 0 else tiles - 1 - order // 2  # tasks into one contiguous range per
        h = task % kv_heads  # thread, and a causal chunk's later tiles have more keys
        r0 = tile_starts[tile]
        n = tile_starts[tile + 1] - r0
        seq = row_seq[r0]
        lo = kv_starts[r0]
        hi = kv_lens[r0]
        for i in range(1, n):
            lo = min(lo, kv_starts[r0 + i])
            hi = max(hi, kv_lens[r0 + i])
        width = hi - lo
        # the tile's keys (transposed) and values, widened to float32 once for all its rows
        keys = np.empty((dim, width), dtype=np.float32)
        values = np.empty((width, dim), dtype=np.float32)
        key_bits = keys.view(np.uint32)  # written through the bits, read as float32 (a C-contiguous array)
        value_bits = values.view(np.uint32)
        staged = np.empty((16, dim), dtype=np.uint32)  # sixteen key rows, widened, before their transpose
        for c0 in range(0, width, 16):
            m = min(16, width - c0)
            for j in range(m):
                block = block_tables[seq, (lo + c0 + j) // block_size]
                slot = (lo + c0 + j) % block_size
                k_row, v_row, v_out, k_staged = k_bits[block, slot, h], v_bits[block, slot, h], value_bits[c0 + j], \
                    staged[j]
                for d in range(dim):
                    k_staged[d] = np.uint32(k_row[d]) << shift
                for d in range(dim):
                    v_out[d] = np.uint32(v_row[d]) << shift
            for d in range(dim):  # the transpose, in cache: contiguous writes
                k_out = key_bits[d, c0:c0 + m]
                for j in range(m):
                    k_out[j] = staged[j, d]
        probs = np.empty(width, dtype=np.float32)
        probs2 = np.empty(width, dtype=np.float32)
        summed = np.empty(dim, dtype=np.float32)
        summed2 = np.empty(dim, dtype=np.float32)
        for i in range(n):
            row = r0 + i
            first = kv_starts[row] - lo
            last = kv_lens[row] - lo
            g = 0
            while g + 2 <= group:  # two query heads of the GQA group share every key and value they read
                _two_queries(q[row, h, g], q[row, h, g + 1], keys, values, first, last, scale, probs[first:last],
                             probs2[first:last], summed, summed2)
                out[row, h, g, :] = summed
                out[row, h, g + 1, :] = summed2
                g += 2
            if g < group:
                _one_query(q[row, h, g], keys, values, first, last, scale, probs[first:last], summed)
                out[row, h, g, :] = summed


def _softmax(p, scale):
    """p <- softmax(p * scale) over its keys in key order (the peak, then exp and the total, then the division)."""
    length = p.shape[0]
    peak = p[0] * scale
    for c in range(length):
        p[c] = p[c] * scale
        peak = max(peak, p[c])
    total = np.float32(0.0)
    for c in range(length):
        e = np.exp(p[c] - peak)
        p[c] = e
        total += e
    for c in range(length):
        p[c] /= total


def _one_query(x, keys, values, first, last, scale, p, summed):
    """One query head over keys first..last-1: scores summed over d in order, four d per pass over the keys; the
    softmax; the weighted sum of values over keys in order, eight keys per pass over the features."""
    length = last - first
    dim = x.shape[0]
    for c in range(length):
        p[c] = np.float32(0.0)
    d = 0
    while d + 4 <= dim:
        x0, x1, x2, x3 = x[d], x[d + 1], x[d + 2], x[d + 3]
        k0, k1, k2, k3 = keys[d, first:last], keys[d + 1, first:last], keys[d + 2, first:last], keys[d + 3, first:last]
        for c in range(length):
            p[c] = (((p[c] + x0 * k0[c]) + x1 * k1[c]) + x2 * k2[c]) + x3 * k3[c]
        d += 4
    while d < dim:
        x0, k0 = x[d], keys[d, first:last]
        for c in range(length):
            p[c] += x0 * k0[c]
        d += 1
    _softmax(p, scale)
    for d in range(dim):
        summed[d] = np.float32(0.0)
    c = 0
    while c + 8 <= length:
        p0, p1, p2, p3, p4, p5, p6, p7 = p[c], p[c + 1], p[c + 2], p[c + 3], p[c + 4], p[c + 5], p[c + 6], p[c + 7]
        v0, v1, v2, v3 = values[first + c], values[first + c + 1], values[first + c + 2], values[first + c + 3]
        v4, v5, v6, v7 = values[first + c + 4], values[first + c + 5], values[first + c + 6], values[first + c + 7]
        for d in range(dim):
            summed[d] = (((((((summed[d] + p0 * v0[d]) + p1 * v1[d]) + p2 * v2[d]) + p3 * v3[d])
                           + p4 * v4[d]) + p5 * v5[d]) + p6 * v6[d]) + p7 * v7[d]
        c += 8
    while c < length:
        p0, v0 = p[c], values[first + c]
        for d in range(dim):
            summed[d] += p0 * v0[d]
        c += 1


def _two_queries(x, y, keys, values, first, last, scale, p, r, sx, sy):
    """`_one_query` for two query heads at once: each output's additions are the same, in the same order; only
    the loads of keys and values are shared (half the memory traffic of two calls)."""
    length = last - first
    dim = x.shape[0]
    for c in range(length):
        p[c] = np.float32(0.0)
        r[c] = np.float32(0.0)
    d = 0
    while d + 4 <= dim:
        x0, x1, x2, x3 = x[d], x[d + 1], x[d + 2], x[d + 3]
        y0, y1, y2, y3 = y[d], y[d + 1], y[d + 2], y[d + 3]
        k0, k1, k2, k3 = keys[d, first:last], keys[d + 1, first:last], keys[d + 2, first:last], keys[d + 3, first:last]
        for c in range(length):
            a0, a1, a2, a3 = k0[c], k1[c], k2[c], k3[c]
            p[c] = (((p[c] + x0 * a0) + x1 * a1) + x2 * a2) + x3 * a3
            r[c] = (((r[c] + y0 * a0) + y1 * a1) + y2 * a2) + y3 * a3
        d += 4
    while d < dim:
        x0, y0, k0 = x[d], y[d], keys[d, first:last]
        for c in range(length):
            p[c] += x0 * k0[c]
            r[c] += y0 * k0[c]
        d += 1
    _softmax(p, scale)
    _softmax(r, scale)
    for d in range(dim):
        sx[d] = np.float32(0.0)
        sy[d] = np.float32(0.0)
    c = 0
    while c + 8 <= length:
        p0, p1, p2, p3, p4, p5, p6, p7 = p[c], p[c + 1], p[c + 2], p[c + 3], p[c + 4], p[c + 5], p[c + 6], p[c + 7]
        q0, q1, q2, q3, q4, q5, q6, q7 = r[c], r[c + 1], r[c + 2], r[c + 3], r[c + 4], r[c + 5], r[c + 6], r[c + 7]
        v0, v1, v2, v3 = values[first + c], values[first + c + 1], values[first + c + 2], values[first + c + 3]
        v4, v5, v6, v7 = values[first + c + 4], values[first + c + 5], values[first + c + 6], values[first + c + 7]
        for d in range(dim):
            w0, w1, w2, w3, w4, w5, w6, w7 = v0[d], v1[d], v2[d], v3[d], v4[d], v5[d], v6[d], v7[d]
            sx[d] = (((((((sx[d] + p0 * w0) + p1 * w1) + p2 * w2) + p3 * w3) + p4 * w4) + p5 * w5) + p6 * w6) + p7 * w7
            sy[d] = (((((((sy[d] + q0 * w0) + q1 * w1) + q2 * w2) + q3 * w3) + q4 * w4) + q5 * w5) + q6 * w6) + q7 * w7
        c += 8
    while c < length:
        p0, q0, v0 = p[c], r[c], values[first + c]
        for d in range(dim):
            sx[d] += p0 * v0[d]
            sy[d] += q0 * v0[d]
        c += 1


if njit:  # the kernel calls these compiled (fastmath off, like the kernel); as plain Python it calls them too
    _softmax = njit(fastmath=False, cache=True)(_softmax)
    _one_query = njit(fastmath=False, cache=True)(_one_query)
    _two_queries = njit(fastmath=False, cache=True)(_two_queries)


_kernel = njit(parallel=True, fastmath=False, cache=True)(rows_attention_jit_ready) if njit else None


def query_tiles(row_seq: np.ndarray, tile: int = QUERY_TILE) -> np.ndarray:
    """tile_starts for rows grouped by sequence (row_seq non-decreasing): runs of one sequence cut every `tile` rows."""
    rows = np.arange(len(row_seq))
    run_starts = np.flatnonzero(np.r_[True, row_seq[1:] != row_seq[:-1]]) if len(row_seq) else rows
    run_of_row = run_starts[np.searchsorted(run_starts, rows, side="right") - 1]
    return np.r_[rows[(rows - run_of_row) % tile == 0], len(row_seq)].astype(np.int64)


def rows_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                         row_seq: torch.Tensor, kv_lens: torch.Tensor, tile_starts: torch.Tensor,
                         window: int | None = None, image_spans: torch.Tensor | None = None) -> torch.Tensor:
    """q (rows, kv_heads, group, D), float32 or bfloat16 CPU tensors; returns the same shape and dtype.

    Row r attends to the first kv_lens[r] positions of sequence row_seq[r] (block_tables[row_seq[r]]), or to
    the last `window` of them (sliding-window layers); with `image_spans` ((2, rows) [start, end), 0 for text),
    an image row also to its image's later positions (HF's Gemma-3 rule: the window still bounds it from below).
    """
    if _kernel is None:
        raise ImportError("the batch-invariant attention kernel needs numba; install it with: pip install numba==0.68.1")
    assert q.dtype == k_cache.dtype == v_cache.dtype and q.dtype in (torch.float32, torch.bfloat16)
    assert k_cache.is_contiguous() and v_cache.is_contiguous()
    if q.dtype == torch.bfloat16:
        k_bits = k_cache.view(torch.int16).numpy().view(np.uint16)  # the cache's own memory, no copy
        v_bits = v_cache.view(torch.int16).numpy().view(np.uint16)
        shift = np.uint32(16)
    else:
        k_bits = k_cache.view(torch.int32).numpy().view(np.uint32)
        v_bits = v_cache.view(torch.int32).numpy().view(np.uint32)
        shift = np.uint32(0)
    queries = q.float().contiguous()
    out = torch.empty_like(queries)
    starts = torch.zeros_like(kv_lens) if window is None else (kv_lens - window).clamp(min=0)
    if image_spans is not None:  # an image row also sees its image's later keys (earlier ones it sees causally)
        kv_lens = torch.maximum(kv_lens, image_spans[1].to(kv_lens.dtype))
    args = (queries.numpy(), k_bits, v_bits, shift, np.ascontiguousarray(block_tables.numpy()), row_seq.numpy(),
            kv_lens.numpy(), starts.numpy(), tile_starts.numpy(), np.float32(q.shape[-1] ** -0.5), out.numpy())
    _kernel(*args)
    return out.to(q.dtype)
