"""Fused MaxSim in Triton: one program per (candidate page, query), similarities never stored.

Each program loads its query's vectors once (BLOCK_Q x BLOCK_D, zero-padded), then walks the
page's rows in tiles of BLOCK_N: load the tile (fp16/bf16/int8/fp32, dequantised in registers),
`tl.dot` against the query (fp32 accumulate), mask rows past the page end with -inf, fold into a
running per-query-vector max. The page's score (weighted sum of the maxima) is the only write.
So the bytes moved are the candidate pages' rows, read once: memory-bound at HBM bandwidth,
where the einsum reference writes and re-reads a (nq x rows) fp32 similarity tensor.

On CPU it runs under the Triton interpreter (`TRITON_INTERPRET=1` set before `import triton`);
`tests/kernels/test_maxsim_triton.py` does that in a subprocess.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - triton ships with torch on Linux
    raise ImportError("the triton MaxSim backend needs triton; install it with: pip install triton") from error

__all__ = ["maxsim_triton", "maxsim_batch_triton"]


@triton.jit
def _maxsim_kernel(
    q_ptr, q_len_ptr, w_ptr, v_ptr, scale_ptr, offsets_ptr, page_ids_ptr, out_ptr,
    dim, n_candidates,
    stride_qb, stride_qn, stride_wb, stride_vn, stride_pb, stride_ob,
    BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_WEIGHT: tl.constexpr, LOW_PRECISION: tl.constexpr,
):
    c = tl.program_id(0)  # candidate (axis 0: up to 2^31-1 programs; axis 1 stops at 65,535)
    b = tl.program_id(1)  # query of the batch
    page = tl.load(page_ids_ptr + b * stride_pb + c)
    start = tl.load(offsets_ptr + page)
    end = tl.load(offsets_ptr + page + 1)
    n_q = tl.load(q_len_ptr + b)
    q_offs = tl.arange(0, BLOCK_Q)
    d_offs = tl.arange(0, BLOCK_D)
    q_mask = (q_offs[:, None] < n_q) & (d_offs[None, :] < dim)
    q = tl.load(q_ptr + b * stride_qb + q_offs[:, None] * stride_qn + d_offs[None, :], mask=q_mask, other=0.0)
    if LOW_PRECISION:
        q = q.to(tl.float16)  # (BLOCK_Q, BLOCK_D): fp16 x fp16 -> fp32 tensor-core dot
    best = tl.full((BLOCK_Q,), float("-inf"), tl.float32)
    for n0 in range(start, end, BLOCK_N):
        n_offs = n0 + tl.arange(0, BLOCK_N)
        rows = n_offs < end
        v = tl.load(v_ptr + n_offs[:, None] * stride_vn + d_offs[None, :],
                    mask=rows[:, None] & (d_offs[None, :] < dim), other=0.0)  # (BLOCK_N, BLOCK_D)
        if LOW_PRECISION:
            v = v.to(tl.float16)
        else:
            v = v.to(tl.float32)
        sims = tl.dot(q, tl.trans(v), input_precision="ieee") if not LOW_PRECISION else tl.dot(q, tl.trans(v))
        if HAS_SCALE:
            sims = sims * tl.load(scale_ptr + n_offs, mask=rows, other=0.0)[None, :]
        sims = tl.where(rows[None, :], sims, float("-inf"))  # (BLOCK_Q, BLOCK_N)
        best = tl.maximum(best, tl.max(sims, axis=1))
    best = tl.where((q_offs < n_q) & (end > start), best, 0.0)  # padding rows and empty pages add 0
    if HAS_WEIGHT:
        best = best * tl.load(w_ptr + b * stride_wb + q_offs, mask=q_offs < n_q, other=0.0)
    tl.store(out_ptr + b * stride_ob + c, tl.sum(best, axis=0))


def maxsim_batch_triton(queries: torch.Tensor, query_lengths: torch.Tensor, vectors: torch.Tensor,
                        offsets: torch.Tensor, page_ids: torch.Tensor, *, scales: torch.Tensor | None = None,
                        query_weights: torch.Tensor | None = None, block_n: int = 64) -> torch.Tensor:
    """MaxSim for a batch of queries, each against its own candidate list.

    Args:
        queries: (b, nq_max, dim) float32/float16, zero-padded past query_lengths.
        query_lengths: (b,) int32/int64 real vectors per query.
        vectors: (total, dim) float32/float16/bfloat16/int8, rows contiguous.
        offsets: (num_pages + 1,) int64 row offsets.
        page_ids: (b, m) int64 candidates per query.
        scales: (total,) float32, int8 only.
        query_weights: (b, nq_max) float32 or None.
        block_n: page rows per tile.

    Returns:
        (b, m) float32 scores.
    """
    assert queries.ndim == 3 and vectors.ndim == 2 and queries.shape[2] == vectors.shape[1], "shape mismatch"
    assert page_ids.ndim == 2 and page_ids.shape[0] == queries.shape[0], "page_ids must be (b, m)"
    assert query_lengths.shape == (queries.shape[0],), "query_lengths must be (b,)"
    assert vectors.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8), vectors.dtype
    assert (vectors.dtype == torch.int8) == (scales is not None), "int8 vectors need scales"
    assert vectors.stride(1) == 1 and queries.stride(2) == 1, "last dimension must be contiguous"
    assert page_ids.stride(1) == 1 and offsets.is_contiguous(), "page_ids rows and offsets must be contiguous"
    devices = {t.device for t in (queries, query_lengths, vectors, offsets, page_ids) if t is not None}
    assert len(devices) == 1, f"all tensors must be on one device, got {devices}"
    batch, nq_max, dim = queries.shape
    m = page_ids.shape[1]
    out = torch.empty((batch, m), dtype=torch.float32, device=vectors.device)
    if batch == 0 or m == 0:
        return out
    if query_weights is not None:
        assert query_weights.shape == (batch, nq_max) and query_weights.stride(1) == 1, "query_weights (b, nq_max)"
        query_weights = query_weights.to(torch.float32)
    block_q = max(16, triton.next_power_of_2(nq_max))
    block_d = max(16, triton.next_power_of_2(dim))
    low_precision = vectors.dtype != torch.float32
    dummy = out  # stands in for absent optional pointers (never read)
    _maxsim_kernel[(m, batch)](
        queries, query_lengths, query_weights if query_weights is not None else dummy, vectors,
        scales if scales is not None else dummy, offsets, page_ids, out,
        dim, m,
        queries.stride(0), queries.stride(1), query_weights.stride(0) if query_weights is not None else 0,
        vectors.stride(0), page_ids.stride(0), out.stride(0),
        BLOCK_Q=block_q, BLOCK_N=block_n, BLOCK_D=block_d,
        HAS_SCALE=scales is not None, HAS_WEIGHT=query_weights is not None, LOW_PRECISION=low_precision,
    )
    return out


def maxsim_triton(query, vectors, offsets, page_ids, scales=None, query_weights=None) -> torch.Tensor:
    """One query against its candidates (the `kernels.maxsim.maxsim` signature, checked inputs)."""
    device = vectors.device
    queries = query.to(device=device, dtype=torch.float32).unsqueeze(0).contiguous()
    lengths = torch.tensor([query.shape[0]], dtype=torch.int64, device=device)
    weights = None if query_weights is None else query_weights.to(device).unsqueeze(0).contiguous()
    ids = page_ids.to(device).unsqueeze(0).contiguous()
    return maxsim_batch_triton(queries, lengths, vectors, offsets.to(device=device, dtype=torch.int64).contiguous(),
                               ids, scales=None if scales is None else scales.to(device), query_weights=weights)[0]
