"""Triton BM25 for a GPU: batched scoring into a dense (batch, num_docs) block, then block top-k.

Scoring: one launch per query position j (queries padded to the longest); program (c, b) adds
chunk c of the postings of query b's j-th token into row b. Within a launch a doc receives at
most one add per row (a token's postings have distinct docs), so no atomics are needed, and
launches run in query order: every score is bm25s's float32 running sum, bit for bit. Rows
start at -inf, which marks "no posting" (the first add writes the contribution itself, as
0 + x = x), so eligibility needs no second array.

Top-k: program (blk, b) extracts the k best (score desc, doc id asc) of its BLOCK_DOCS docs by k
rounds of max + lowest-id argmax (k <= 64), writing (batch, blocks, k) candidates; the survivors
are merged with `torch.topk` on an exact int64 key (order-preserving score bits << 32 | ~doc id).
For k > 64 that key is used on the whole row. Candidate masks (`candidates`) are applied as -inf.

`GpuScoreMatrix.from_matrix(matrix)` copies the arrays to the device once; `kernels.bm25.topk`
with backend="auto" picks this path for a GpuScoreMatrix. Tests run the kernels on the CPU under
`TRITON_INTERPRET=1` (tests/kernels/test_bm25_triton.py, in a subprocess).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover
    raise ImportError("the triton BM25 backend needs triton; install it with: pip install triton") from error

__all__ = ["GpuScoreMatrix", "topk_batch_triton", "score_batch_triton"]

_MAX_BLOCK_K = 64  # larger k: exact int64-key torch.topk over the whole row
_ROW_BUDGET_BYTES = 1 << 30  # dense score rows per launch group
_MAX_ROWS = 65_535  # grid axis 1 limit (queries per launch)


@dataclass(slots=True, frozen=True)
class GpuScoreMatrix:
    """A ScoreMatrix's arrays on a torch device (copied once)."""

    data: torch.Tensor  # float32 (nnz,)
    indices: torch.Tensor  # int32 (nnz,)
    indptr: torch.Tensor  # int64 (vocab+1,)
    num_docs: int  # documents
    indptr_host: np.ndarray  # int64 (vocab+1,) host copy: postings counts for launch grids
    nonoccurrence: np.ndarray | None = None  # float32 (vocab,) BM25L/BM25+ constant, host

    @classmethod
    def from_matrix(cls, matrix, device: str | torch.device = "cuda") -> "GpuScoreMatrix":
        """Copy a `kernels.bm25.ScoreMatrix` to `device`."""
        import warnings

        with warnings.catch_warnings():  # memory-mapped (read-only) arrays: copied, or only read on the CPU
            warnings.simplefilter("ignore", UserWarning)
            return cls._copy(matrix, device)

    @classmethod
    def _copy(cls, matrix, device) -> "GpuScoreMatrix":
        return cls(
            data=torch.as_tensor(np.asarray(matrix.data), dtype=torch.float32).to(device),
            indices=torch.as_tensor(np.asarray(matrix.indices).astype(np.int32, copy=False)).to(device),
            indptr=torch.as_tensor(np.asarray(matrix.indptr).astype(np.int64, copy=False)).to(device),
            num_docs=matrix.num_docs,
            indptr_host=np.asarray(matrix.indptr).astype(np.int64),
            nonoccurrence=matrix.nonoccurrence,
        )

    @property
    def vocab_size(self) -> int:
        return len(self.indptr_host) - 1


@triton.jit
def _scatter_kernel(scores_ptr, tokens_ptr, data_ptr, indices_ptr, indptr_ptr, j, stride_sb, stride_tb,
                    BLOCK: tl.constexpr):
    c = tl.program_id(0)  # postings chunk (axis 0: no 65,535 limit)
    b = tl.program_id(1)  # query
    token = tl.load(tokens_ptr + b * stride_tb + j)
    if token >= 0:
        start = tl.load(indptr_ptr + token)
        end = tl.load(indptr_ptr + token + 1)
        offs = start + c * BLOCK + tl.arange(0, BLOCK)
        live = offs < end
        docs = tl.load(indices_ptr + offs, mask=live, other=0)
        vals = tl.load(data_ptr + offs, mask=live, other=0.0)
        row = scores_ptr + b * stride_sb + docs
        old = tl.load(row, mask=live, other=0.0)
        tl.store(row, tl.where(old == float("-inf"), vals, old + vals), mask=live)


@triton.jit
def _block_topk_kernel(scores_ptr, mask_ptr, out_scores_ptr, out_ids_ptr, num_docs, stride_sb, stride_ob,
                       HAS_MASK: tl.constexpr, K: tl.constexpr, BLOCK_DOCS: tl.constexpr):
    blk = tl.program_id(0)  # doc block (axis 0: no 65,535 limit)
    b = tl.program_id(1)  # query
    offs = blk * BLOCK_DOCS + tl.arange(0, BLOCK_DOCS)
    live = offs < num_docs
    x = tl.load(scores_ptr + b * stride_sb + offs, mask=live, other=float("-inf"))
    if HAS_MASK:
        keep = tl.load(mask_ptr + offs, mask=live, other=0)
        x = tl.where(keep != 0, x, float("-inf"))
    out = out_scores_ptr + b * stride_ob + blk * K
    out_id = out_ids_ptr + b * stride_ob + blk * K
    for i in range(K):
        best = tl.max(x, axis=0)
        best_id = tl.min(tl.where(x == best, offs, 2147483647), axis=0)  # ties: lowest doc id
        found = best > float("-inf")
        tl.store(out + i, best)
        tl.store(out_id + i, tl.where(found, best_id, -1))
        x = tl.where(offs == best_id, float("-inf"), x)


def score_batch_triton(matrix: GpuScoreMatrix, queries: list[np.ndarray], block: int = 1024) -> torch.Tensor:
    """Dense (len(queries), num_docs) float32 scores; -inf where a doc matches no query token."""
    device = matrix.data.device
    width = max((len(q) for q in queries), default=0)
    tokens = np.full((len(queries), max(width, 1)), -1, dtype=np.int64)
    for i, q in enumerate(queries):
        tokens[i, : len(q)] = q
    scores = torch.full((len(queries), matrix.num_docs), float("-inf"), dtype=torch.float32, device=device)
    tokens_dev = torch.from_numpy(tokens).to(device)
    counts = np.where(tokens >= 0, matrix.indptr_host[np.maximum(tokens, 0) + 1] - matrix.indptr_host[np.maximum(tokens, 0)], 0)
    for j in range(width):  # query order: the float32 sums equal bm25s's
        chunks = int(-(-counts[:, j].max() // block))
        if chunks == 0:
            continue
        _scatter_kernel[(chunks, len(queries))](scores, tokens_dev, matrix.data, matrix.indices, matrix.indptr, j,
                                                scores.stride(0), tokens_dev.stride(0), BLOCK=block)
    return scores


def _sortable_key(scores: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """int64 key ordering (score desc, id asc) exactly: order-preserving float bits, then ~id."""
    bits = scores.contiguous().view(torch.int32).to(torch.int64)
    bits = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # negative floats sort in reverse
    return (bits << 32) | (0xFFFFFFFF - ids.to(torch.int64))


def topk_batch_triton(matrix, queries: list[np.ndarray], k: int, *, candidates: np.ndarray | None = None,
                      block_docs: int = 1024) -> list[tuple[np.ndarray, np.ndarray]]:
    """Top-k for checked int64 queries (see `kernels.bm25.topk_batch`); accepts a ScoreMatrix too."""
    if not isinstance(matrix, GpuScoreMatrix):
        matrix = GpuScoreMatrix.from_matrix(matrix, "cuda" if torch.cuda.is_available() else "cpu")
    k = max(0, min(int(k), matrix.num_docs))
    if not queries:
        return []
    if k == 0:
        return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in queries]
    device = matrix.data.device
    mask = None if candidates is None else torch.from_numpy(candidates.astype(np.uint8)).to(device)
    rows_per_group = min(_MAX_ROWS, max(1, _ROW_BUDGET_BYTES // (4 * max(matrix.num_docs, 1))))
    results: list[tuple[np.ndarray, np.ndarray]] = []
    for lo in range(0, len(queries), rows_per_group):
        group = queries[lo: lo + rows_per_group]
        scores = score_batch_triton(matrix, group)
        doc_ids = None
        if k <= _MAX_BLOCK_K:
            n_blocks = triton.cdiv(matrix.num_docs, block_docs)
            cand_scores = torch.empty((len(group), n_blocks * k), dtype=torch.float32, device=device)
            cand_ids = torch.empty((len(group), n_blocks * k), dtype=torch.int32, device=device)
            _block_topk_kernel[(n_blocks, len(group))](
                scores, mask if mask is not None else cand_ids, cand_scores, cand_ids, matrix.num_docs,
                scores.stride(0), cand_scores.stride(0), HAS_MASK=mask is not None, K=k, BLOCK_DOCS=block_docs)
            scores, doc_ids = cand_scores, cand_ids.to(torch.int64)
        else:
            if mask is not None:
                scores = torch.where(mask[None, :] != 0, scores, torch.full_like(scores, float("-inf")))
            doc_ids = torch.arange(matrix.num_docs, device=device).expand_as(scores)
        take = min(k, scores.shape[1])
        keys = _sortable_key(scores, torch.where(doc_ids < 0, torch.zeros_like(doc_ids), doc_ids))
        order = torch.topk(keys, take, dim=1).indices  # (rows, take)
        top_scores = torch.gather(scores, 1, order).cpu().numpy()
        top_ids = torch.gather(doc_ids, 1, order).cpu().numpy()
        for row in range(len(group)):
            live = top_scores[row] > -np.inf
            results.append((top_ids[row][live].astype(np.int64), top_scores[row][live].astype(np.float32)))
    return results
