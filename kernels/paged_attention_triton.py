"""Paged attention in Triton: varlen prefill over block tables, and split-K decode.

Both read K/V in place from the paged cache `(num_blocks, block_size, kv_heads, head_dim)`
through the block tables (layout and semantics: `kernels/paged_attention.py`, whose
`paged_attention_reference` is the definition they are tested against). No mask tensor exists:
causality (queries at the end of their context, prefix-cached blocks included) and the optional
sliding window are computed inside the kernels from `cu_seqlens_q` and `context_lens`.

- `paged_prefill`: one program per (sequence, KV head, tile of queries): the tile's rows are its
  queries times the KV head's whole group of query heads (BLOCK_M rows: BLOCK_M // BLOCK_G queries
  of BLOCK_G heads), so each K/V tile is read once for the group, not once per query head (7x
  fewer reads for Qwen2.5-7B, 16x for GLM-4.1V); flash-attention style online softmax over key
  tiles of BLOCK_N, stopping at the tile's causal bound. Sequences with one query (decode rows of a
  mixed step) go through it too.
- `paged_decode`: one query per sequence. One program per (sequence, KV head, split of the
  context): the KV head's whole group of query heads is one tile, so each K/V row is read once for
  the group (GQA). Long contexts are cut in splits of `split_len` keys computed in parallel
  (split-K, flash-decoding), then `_decode_reduce_kernel` merges the partial softmaxes. Splits past
  a sequence's context exit at once, so a fixed grid serves every length (CUDA graphs).

On the CPU the kernels run under the Triton interpreter (`TRITON_INTERPRET=1` set before
`import triton`); the parity tests do that in a subprocess (tests/kernels/test_paged_attention.py).
The interpreter's `tl.dot` returns garbage for bfloat16 operands (fp16 and fp32 are right; checked
with triton 3.8), so when interpreted, bfloat16 tiles are widened to float32 before each dot: a
bf16 x bf16 product is exact in float32, which is also what tensor cores accumulate in.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - triton ships with torch on Linux
    raise ImportError("the triton attention backend needs triton; install it with: pip install triton") from error

from .paged_attention import check_paged_inputs

__all__ = ["DecodeWorkspace", "compile_for_target", "decode_split_len", "paged_decode", "paged_prefill",
           "prefill_tile"]

_LOG2E = 1.4426950408889634
# Tile sizes the engine launches with on a GPU (the interpreted tests pass smaller ones).
PREFILL_BLOCK_M = 64
PREFILL_BLOCK_N = 64
DECODE_BLOCK_N = 64
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _dot_fp32(dtype: torch.dtype) -> bool:
    """Widen tiles to float32 before tl.dot: float32 data (exact IEEE dot), or bf16 under the interpreter."""
    return dtype == torch.float32 or (_INTERPRETED and dtype == torch.bfloat16)


@triton.jit
def _cache_rows(tables_ptr, seq, keys, key_live, stride_tb, BLOCK_SIZE: tl.constexpr):
    """(BLOCK_N,) int64 row of each key of sequence `seq` in the cache seen as (blocks * block_size) rows."""
    blocks = tl.load(tables_ptr + seq * stride_tb + keys // BLOCK_SIZE, mask=key_live, other=0).to(tl.int64)
    return blocks * BLOCK_SIZE + keys % BLOCK_SIZE


@triton.jit
def _softmax_step(q, k, v, visible, best, total, acc, qk_scale, DOT_FP32: tl.constexpr, PRECISION: tl.constexpr):
    """Fold one key tile into the online softmax: returns the new (row max, denominator, weighted values)."""
    if DOT_FP32:
        k = k.to(tl.float32)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # (rows, BLOCK_N), log2 units
    scores = tl.where(visible, scores, float("-inf"))
    new_best = tl.maximum(best, tl.max(scores, axis=1))
    safe = tl.where(new_best == float("-inf"), 0.0, new_best)  # rows that saw no key yet
    p = tl.exp2(scores - safe[:, None])
    alpha = tl.exp2(best - safe)
    total = total * alpha + tl.sum(p, axis=1)
    if DOT_FP32:
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision=PRECISION)
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return new_best, total, acc


@triton.jit
def _prefill_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, cu_q_ptr, ctx_ptr, tables_ptr, spans_ptr,
    qk_scale, window, stride_span,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_ks, stride_kh, stride_tb,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, IMAGES: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    tile = tl.program_id(2)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    if tile * BLOCK_Q < q_len:
        context = tl.load(ctx_ptr + seq)
        lanes = tl.arange(0, BLOCK_M)  # row = (query of the tile, head of the group), heads fastest
        rows = tile * BLOCK_Q + lanes // BLOCK_G  # query index within the chunk
        group = lanes % BLOCK_G
        head = kv_head * GROUP + group
        row_live = (rows < q_len) & (group < GROUP)
        query_pos = context - q_len + rows  # (BLOCK_M,) position of each row's query in its sequence
        dims = tl.arange(0, BLOCK_D)
        dim_live = dims < HEAD_DIM
        q = tl.load(q_ptr + (q_start + rows)[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :],
                    mask=row_live[:, None] & dim_live[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
        if DOT_FP32:
            q = q.to(tl.float32)
        best = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        total = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
        first_pos = context - q_len + tile * BLOCK_Q
        hi = tl.minimum(context, first_pos + BLOCK_Q)  # causal: no key after the tile's last query
        lo = tl.where(window > 0, tl.maximum(first_pos - window + 1, 0) // BLOCK_N * BLOCK_N, 0)
        if IMAGES:  # an image row also sees its image's later keys: widen the tile's key range to its end
            image_hi = tl.load(spans_ptr + stride_span + q_start + rows, mask=row_live, other=0)
            hi = tl.maximum(hi, tl.max(image_hi, 0))
        for n0 in range(lo, hi, BLOCK_N):
            keys = n0 + tl.arange(0, BLOCK_N)
            key_live = keys < hi
            rows_k = _cache_rows(tables_ptr, seq, keys, key_live, stride_tb, BLOCK_SIZE)
            kv_offsets = rows_k[:, None] * stride_ks + kv_head * stride_kh + dims[None, :]
            kv_mask = key_live[:, None] & dim_live[None, :]
            k = tl.load(k_ptr + kv_offsets, mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D): once for the group
            v = tl.load(v_ptr + kv_offsets, mask=kv_mask, other=0.0)
            visible = key_live[None, :] & (keys[None, :] <= query_pos[:, None])
            if IMAGES:  # (its earlier keys it sees causally)
                visible = visible | (key_live[None, :] & (keys[None, :] < image_hi[:, None]))
            if window > 0:
                visible = visible & (keys[None, :] > query_pos[:, None] - window)
            best, total, acc = _softmax_step(q, k, v, visible, best, total, acc, qk_scale, DOT_FP32, PRECISION)
        out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
        tl.store(out_ptr + (q_start + rows)[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_live[:, None] & dim_live[None, :])


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, ctx_ptr, tables_ptr, part_acc_ptr, part_best_ptr, part_total_ptr,
    qk_scale, window,
    stride_qb, stride_qh, stride_ks, stride_kh, stride_tb,
    stride_ab, stride_ah, stride_as, stride_mb, stride_mh,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_LEN: tl.constexpr, DOT_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    context = tl.load(ctx_ptr + seq)
    start = split * SPLIT_LEN
    lo = tl.where(window > 0, tl.maximum(start, context - window), start)
    end = tl.minimum(start + SPLIT_LEN, context)
    if lo < end:
        members = tl.arange(0, BLOCK_G)  # query heads of this KV head's group
        member_live = members < GROUP
        heads = kv_head * GROUP + members
        dims = tl.arange(0, BLOCK_D)
        dim_live = dims < HEAD_DIM
        q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + dims[None, :],
                    mask=member_live[:, None] & dim_live[None, :], other=0.0)  # (BLOCK_G, BLOCK_D)
        if DOT_FP32:
            q = q.to(tl.float32)
        best = tl.full((BLOCK_G,), float("-inf"), tl.float32)
        total = tl.zeros((BLOCK_G,), tl.float32)
        acc = tl.zeros((BLOCK_G, BLOCK_D), tl.float32)
        for n0 in range(lo // BLOCK_N * BLOCK_N, end, BLOCK_N):
            keys = n0 + tl.arange(0, BLOCK_N)
            key_live = (keys < end) & (keys >= lo)
            rows_k = _cache_rows(tables_ptr, seq, keys, key_live, stride_tb, BLOCK_SIZE)
            kv_offsets = rows_k[:, None] * stride_ks + kv_head * stride_kh + dims[None, :]
            kv_mask = key_live[:, None] & dim_live[None, :]
            k = tl.load(k_ptr + kv_offsets, mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
            v = tl.load(v_ptr + kv_offsets, mask=kv_mask, other=0.0)
            best, total, acc = _softmax_step(q, k, v, key_live[None, :], best, total, acc, qk_scale, DOT_FP32,
                                             PRECISION)
        part = seq * stride_ab + heads[:, None] * stride_ah + split * stride_as + dims[None, :]
        tl.store(part_acc_ptr + part, acc, mask=member_live[:, None] & dim_live[None, :])
        stat = seq * stride_mb + heads * stride_mh + split
        tl.store(part_best_ptr + stat, best, mask=member_live)
        tl.store(part_total_ptr + stat, total, mask=member_live)


@triton.jit
def _decode_reduce_kernel(
    part_acc_ptr, part_best_ptr, part_total_ptr, ctx_ptr, out_ptr, window,
    stride_ab, stride_ah, stride_as, stride_mb, stride_mh, stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, SPLIT_LEN: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    context = tl.load(ctx_ptr + seq)
    first = tl.where(window > 0, tl.maximum(context - window, 0) // SPLIT_LEN, 0)  # earliest split with a key
    splits = tl.cdiv(context, SPLIT_LEN)
    dims = tl.arange(0, BLOCK_D)
    dim_live = dims < HEAD_DIM
    stats = part_best_ptr + seq * stride_mb + head * stride_mh
    totals = part_total_ptr + seq * stride_mb + head * stride_mh
    parts = part_acc_ptr + seq * stride_ab + head * stride_ah + dims
    best = tl.load(stats + first)
    total = tl.load(totals + first)
    acc = tl.load(parts + first * stride_as, mask=dim_live, other=0.0)
    for split in range(first + 1, splits):
        split_best = tl.load(stats + split)
        new_best = tl.maximum(best, split_best)
        old_weight = tl.exp2(best - new_best)
        split_weight = tl.exp2(split_best - new_best)
        acc = acc * old_weight + tl.load(parts + split * stride_as, mask=dim_live, other=0.0) * split_weight
        total = total * old_weight + tl.load(totals + split) * split_weight
        best = new_best
    out = acc / total
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty), mask=dim_live)


def _precision(dtype: torch.dtype) -> str:
    """IEEE float32 dots for float32 data (tf32 would round them); other dtypes ignore it."""
    return "ieee" if _dot_fp32(dtype) else "tf32"


def _block(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    assert k_cache.stride(3) == 1 and v_cache.stride(3) == 1, "cache head_dim must be contiguous"
    assert k_cache.stride() == v_cache.stride(), "k and v caches must share strides"
    # the kernels address slot s of block b as row b * block_size + s
    assert k_cache.stride(0) == k_cache.shape[1] * k_cache.stride(1), "cache blocks must hold their slots contiguously"


def paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  context_lens: torch.Tensor, block_tables: torch.Tensor, max_q_len: int, *,
                  out: torch.Tensor | None = None, scale: float | None = None, window: int = 0,
                  block_m: int = 32, block_n: int = 32, image_spans: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of packed query chunks over their paged caches (see module docstring).

    Args:
        q: (tokens, heads, head_dim), float32/float16/bfloat16.
        k_cache, v_cache: (num_blocks, block_size, kv_heads, head_dim), q's dtype.
        cu_seqlens_q: (seqs + 1,) int32 first query row of each sequence.
        context_lens: (seqs,) int32 keys per sequence after its chunk.
        block_tables: (seqs, max_blocks) int32.
        max_q_len: longest chunk (sizes the grid; a host int, known when the step was planned).
        out: optional (tokens, heads, head_dim) output buffer.
        scale: softmax scale (default head_dim ** -0.5).
        window: sliding window in tokens (0: none).
        block_m, block_n: query and key tile sizes.
        image_spans: (2, tokens) int32, per row the [start, end) of the image it belongs to (0, 0 for text): an
            image row also sees its image's later keys (bidirectional image attention, Gemma-3; a window still
            bounds what it sees from below, as HF's masks do); None: causal.

    Returns:
        (tokens, heads, head_dim) in q's dtype.
    """
    check_paged_inputs(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_tables)
    if image_spans is not None:
        assert image_spans.shape == (2, q.shape[0]) and image_spans.dtype == torch.int32 and image_spans.stride(1) == 1
    _check_cache(k_cache, v_cache)
    assert q.stride(2) == 1 and block_tables.stride(1) == 1, "q and block_tables need a contiguous last dimension"
    tokens, heads, head_dim = q.shape
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.dtype == q.dtype and out.stride(2) == 1, "out must be like q"
    seqs = context_lens.shape[0]
    if tokens == 0 or seqs == 0:
        return out
    scale = head_dim ** -0.5 if scale is None else scale
    kv_heads = k_cache.shape[2]
    group, rows, queries = prefill_tile(heads // kv_heads, block_m)
    grid = (seqs, kv_heads, triton.cdiv(max_q_len, queries))
    _prefill_kernel[grid](
        q, k_cache, v_cache, out, cu_seqlens_q, context_lens, block_tables,
        cu_seqlens_q if image_spans is None else image_spans,  # not read without images
        scale * _LOG2E, window, 0 if image_spans is None else image_spans.stride(0),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        GROUP=heads // kv_heads, BLOCK_G=group, BLOCK_Q=queries, BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim,
        BLOCK_D=_block(head_dim), BLOCK_M=rows, BLOCK_N=block_n, DOT_FP32=_dot_fp32(q.dtype),
        PRECISION=_precision(q.dtype), IMAGES=image_spans is not None,
    )
    return out


def prefill_tile(group: int, block_m: int) -> tuple[int, int, int]:
    """(padded group BLOCK_G, rows per tile BLOCK_M, queries per tile BLOCK_Q) for `group` query heads per KV head.

    A tile keeps `block_m` rows whatever the group (registers and shared memory as before): with a group of 8,
    64 rows are 8 queries of 8 heads. A group wider than `block_m` makes its rows the group (one query).
    """
    padded = triton.next_power_of_2(group)
    rows = max(block_m, padded, 16)
    return padded, rows, rows // padded


def decode_split_len(max_context: int, batch: int, kv_heads: int, programs: int = 264, block_n: int = 32) -> int:
    """Keys per split so that batch x kv_heads x splits fills about `programs` programs (2 per SM of an H200).

    A power of two between 2 * block_n and 8192, so few kernel variants are compiled.
    """
    wanted = max(1, programs // max(1, batch * kv_heads))
    split = triton.next_power_of_2(max(1, -(-max_context // wanted)))
    return int(min(max(split, 2 * block_n), 8192))


class DecodeWorkspace:
    """Partial results of the split-K decode, grown on demand and reused across steps.

    Args:
        batch, splits: smallest size to allocate (a CUDA graph reserves its largest need up front,
            then `freeze`s it: captured kernels hold its addresses, so it may not move).
    """

    def __init__(self, batch: int = 0, splits: int = 0) -> None:
        self.min_batch, self.min_splits = batch, splits
        self.acc: torch.Tensor | None = None  # (batch, heads, splits, head_dim) float32
        self.best: torch.Tensor | None = None  # (batch, heads, splits) float32 running max (log2 units)
        self.total: torch.Tensor | None = None  # (batch, heads, splits) float32 softmax denominators
        self.frozen = False

    def buffers(self, batch: int, heads: int, splits: int, head_dim: int, device) -> tuple:
        """(acc, best, total) holding at least batch x heads x splits partials."""
        if self.acc is not None:
            b, h, s, d = self.acc.shape
            if batch <= b and heads == h and splits <= s and head_dim == d:
                return self.acc, self.best, self.total
            assert not self.frozen, f"decode workspace {tuple(self.acc.shape)} is captured; {batch}x{splits} does not fit"
            batch, splits = max(batch, b), max(splits, s)
        batch, splits = max(batch, self.min_batch), max(splits, self.min_splits)
        self.acc = torch.empty((batch, heads, splits, head_dim), dtype=torch.float32, device=device)
        self.best = torch.empty((batch, heads, splits), dtype=torch.float32, device=device)
        self.total = torch.empty((batch, heads, splits), dtype=torch.float32, device=device)
        return self.acc, self.best, self.total

    def freeze(self) -> None:
        self.frozen = True


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, context_lens: torch.Tensor,
                 block_tables: torch.Tensor, *, split_len: int, max_splits: int, out: torch.Tensor | None = None,
                 workspace: DecodeWorkspace | None = None, scale: float | None = None, window: int = 0,
                 block_n: int = 32) -> torch.Tensor:
    """One query per sequence over its paged cache, split-K.

    Args:
        q: (batch, heads, head_dim).
        k_cache, v_cache: (num_blocks, block_size, kv_heads, head_dim).
        context_lens: (batch,) int32 keys per sequence (the query is the last of them).
        block_tables: (batch, max_blocks) int32.
        split_len: keys per split, a multiple of block_n (`decode_split_len`).
        max_splits: grid size along the context; must cover the longest context (a fixed value
            serves a CUDA graph: splits past a context exit at once).
        out: optional (batch, heads, head_dim) output buffer.
        workspace: reusable partial buffers (grown when too small; a new one when None).
        scale: softmax scale (default head_dim ** -0.5).
        window: sliding window in tokens (0: none).
        block_n: key tile size.

    Returns:
        (batch, heads, head_dim) in q's dtype.
    """
    batch, heads, head_dim = q.shape
    assert q.ndim == 3 and k_cache.ndim == 4 and k_cache.shape == v_cache.shape, "q (batch, heads, D); caches 4-D"
    assert q.dtype == k_cache.dtype == v_cache.dtype and q.shape[2] == k_cache.shape[3], "q and caches differ"
    assert heads % k_cache.shape[2] == 0, f"{heads} query heads are not a multiple of {k_cache.shape[2]} KV heads"
    assert context_lens.shape == (batch,) and block_tables.ndim == 2 and block_tables.shape[0] == batch
    _check_cache(k_cache, v_cache)
    assert q.stride(2) == 1 and block_tables.stride(1) == 1, "q and block_tables need a contiguous last dimension"
    assert split_len % block_n == 0, f"split_len {split_len} must be a multiple of block_n {block_n}"
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.dtype == q.dtype and out.stride(2) == 1, "out must be like q"
    if batch == 0:
        return out
    workspace = workspace if workspace is not None else DecodeWorkspace()
    acc, best, total = workspace.buffers(batch, heads, max_splits, head_dim, q.device)
    scale = head_dim ** -0.5 if scale is None else scale
    _decode_split_kernel[(batch, kv_heads, max_splits)](
        q, k_cache, v_cache, context_lens, block_tables, acc, best, total,
        scale * _LOG2E, window,
        q.stride(0), q.stride(1), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        acc.stride(0), acc.stride(1), acc.stride(2), best.stride(0), best.stride(1),
        GROUP=group, BLOCK_G=_block(group), BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=head_dim, BLOCK_D=_block(head_dim),
        BLOCK_N=block_n, SPLIT_LEN=split_len, DOT_FP32=_dot_fp32(q.dtype), PRECISION=_precision(q.dtype),
    )
    _decode_reduce_kernel[(batch, heads)](
        acc, best, total, context_lens, out, window,
        acc.stride(0), acc.stride(1), acc.stride(2), best.stride(0), best.stride(1), out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_D=_block(head_dim), SPLIT_LEN=split_len,
    )
    return out


def compile_for_target(dtype: torch.dtype = torch.bfloat16, capability: int = 90, head_dim: int = 128,
                       group: int = 4, block_size: int = 16) -> dict[str, dict]:
    """Compile the three kernels with the tile sizes the engine launches on a GPU (see `kernels/triton_aot.py`)."""
    from .triton_aot import compile_kernel

    name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    fp32 = dtype == torch.float32
    block_d = _block(head_dim)
    ints = {"cu_q_ptr": "*i32", "ctx_ptr": "*i32", "tables_ptr": "*i32"}
    data = {p: f"*{name}" for p in ("q_ptr", "k_ptr", "v_ptr", "out_ptr")}
    parts = {"part_acc_ptr": "*fp32", "part_best_ptr": "*fp32", "part_total_ptr": "*fp32"}
    precision = "ieee" if fp32 else "tf32"
    padded, rows, queries = prefill_tile(group, PREFILL_BLOCK_M)
    return {
        "prefill": compile_kernel(_prefill_kernel, {**ints, **data, "qk_scale": "fp32"}, dict(
            GROUP=group, BLOCK_G=padded, BLOCK_Q=queries, BLOCK_SIZE=block_size, HEAD_DIM=head_dim, BLOCK_D=block_d,
            BLOCK_M=rows, BLOCK_N=PREFILL_BLOCK_N, DOT_FP32=fp32, PRECISION=precision), capability),
        "decode_split": compile_kernel(_decode_split_kernel, {**ints, **data, **parts, "qk_scale": "fp32"}, dict(
            GROUP=group, BLOCK_G=_block(group), BLOCK_SIZE=block_size, HEAD_DIM=head_dim, BLOCK_D=block_d,
            BLOCK_N=DECODE_BLOCK_N, SPLIT_LEN=512, DOT_FP32=fp32, PRECISION=precision), capability),
        "decode_reduce": compile_kernel(_decode_reduce_kernel, {**ints, **parts, "out_ptr": f"*{name}"}, dict(
            HEAD_DIM=head_dim, BLOCK_D=block_d, SPLIT_LEN=512), capability),
    }
