"""MaxSim (ColBERT/ColPali late interaction) over ragged pages: reference, CPU fast path, dispatch.

score(query, page) = sum_i w_i * max_{j in page} <q_i, v_j>

- `query`: (nq, dim) float vectors (w: optional per-query-vector weights, default 1; HEAVEN's
  key-token pass uses 0/1 weights).
- Page vectors of every page back to back in `vectors` (total, dim), page p owning rows
  `offsets[p]:offsets[p+1]` (ragged: ColQwen pages differ in length). Storage float32,
  float16, bfloat16, or int8 with a per-vector float32 `scales` (v = int8 * scale).
- `page_ids`: which pages to score (candidates); only their rows are read, so the cost is
  proportional to the candidates, not the corpus. Default: every page.
- An empty page scores 0. colpali-engine's `score_multi_vector` pads pages with zero vectors,
  so a padded page's max is never below 0; here the max runs over real vectors only. On pages
  of equal length (no padding) the two agree; the parity tests check both.

Backends: "reference" (colpali's einsum per page, fp32), "torch" (blocked: gather a group of
pages, dequantize to fp32 in L2-sized blocks, one matmul, segment max; the similarity block
never exceeds `block_vectors` rows; groups spread over our own threads, torch single-threaded
in each), "triton" (`kernels/maxsim_triton.py`,
fused: never materialises similarities), "auto" (triton on CUDA tensors, else torch).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

__all__ = ["maxsim", "maxsim_reference", "einsum_maxsim_padded", "as_tensor", "MAXSIM_BACKENDS"]

MAXSIM_BACKENDS = ("auto", "reference", "torch", "triton")
_STORAGE = (torch.float32, torch.float16, torch.bfloat16, torch.int8)


def as_tensor(array) -> torch.Tensor:
    """A torch view of a numpy array or memmap (no copy; read-only memmaps are fine to read)."""
    if isinstance(array, torch.Tensor):
        return array
    with warnings.catch_warnings():  # torch warns on read-only arrays; we never write to them
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.asarray(array))


def _check(query, vectors, offsets, page_ids, scales, query_weights):
    query, vectors, offsets = as_tensor(query), as_tensor(vectors), as_tensor(offsets)
    if query.ndim != 2 or vectors.ndim != 2 or query.shape[1] != vectors.shape[1]:
        raise ValueError(f"query (nq, dim) and vectors (total, dim) must share dim; got {tuple(query.shape)} "
                         f"and {tuple(vectors.shape)}")
    if vectors.dtype not in _STORAGE:
        raise ValueError(f"vectors must be float32, float16, bfloat16 or int8, got {vectors.dtype}")
    if offsets.ndim != 1 or offsets.dtype not in (torch.int32, torch.int64) or len(offsets) < 1:
        raise ValueError("offsets must be a 1-D int tensor of num_pages + 1 row offsets")
    if (vectors.dtype == torch.int8) != (scales is not None):
        raise ValueError("int8 vectors need per-vector `scales` (float32); other dtypes take none")
    num_pages = len(offsets) - 1
    if page_ids is None:
        page_ids = torch.arange(num_pages, dtype=torch.int64)
    page_ids = as_tensor(page_ids).to(torch.int64)
    if page_ids.ndim != 1:
        raise ValueError(f"page_ids must be 1-D, got shape {tuple(page_ids.shape)}")
    if len(page_ids) and (page_ids.min() < 0 or page_ids.max() >= num_pages):
        raise ValueError(f"page_ids must lie in [0, {num_pages}); got {page_ids.min().item()}..{page_ids.max().item()}")
    if scales is not None:
        scales = as_tensor(scales)
        if scales.shape != (vectors.shape[0],) or scales.dtype != torch.float32:
            raise ValueError(f"scales must be float32 of shape ({vectors.shape[0]},)")
    if query_weights is not None:
        query_weights = as_tensor(query_weights).to(torch.float32)
        if query_weights.shape != (query.shape[0],):
            raise ValueError(f"query_weights must have shape ({query.shape[0]},), got {tuple(query_weights.shape)}")
    return query, vectors, offsets, page_ids, scales, query_weights


def maxsim_reference(query, vectors, offsets, *, page_ids=None, scales=None, query_weights=None) -> torch.Tensor:
    """colpali's einsum MaxSim, one page at a time, fp32: the definition the fast paths must equal."""
    query, vectors, offsets, page_ids, scales, query_weights = _check(
        query, vectors, offsets, page_ids, scales, query_weights)
    q = query.float()
    weights = torch.ones(len(q)) if query_weights is None else query_weights.cpu()
    out = torch.zeros(len(page_ids), dtype=torch.float32)
    for i, page in enumerate(page_ids.tolist()):
        start, end = int(offsets[page]), int(offsets[page + 1])
        if end == start:
            continue
        page_vectors = vectors[start:end].float()
        if scales is not None:
            page_vectors = page_vectors * scales[start:end, None]
        sims = torch.einsum("nd,sd->ns", q.cpu(), page_vectors.cpu())  # (nq, page vectors)
        out[i] = (sims.max(dim=1)[0] * weights).sum()
    return out


def einsum_maxsim_padded(queries: torch.Tensor, pages: torch.Tensor) -> torch.Tensor:
    """colpali-engine's `score_multi_vector` formula on padded batches (the anchor), fp32.

    Args:
        queries: (b, nq, dim); pages: (c, s, dim).

    Returns:
        (b, c) scores.
    """
    return torch.einsum("bnd,csd->bcns", queries.float(), pages.float()).max(dim=3)[0].sum(dim=2)


def _gather_rows(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row indices of the listed pages, back to back (cost proportional to their rows)."""
    total = int(lengths.sum())
    firsts = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return firsts + np.arange(total)


def _groups(lengths: np.ndarray, block_vectors: int) -> list[tuple[int, int]]:
    """Consecutive candidate ranges holding about block_vectors rows each (a page is never split)."""
    groups = []
    lo = 0
    while lo < len(lengths):
        hi, rows = lo + 1, int(lengths[lo])
        while hi < len(lengths) and rows + lengths[hi] <= block_vectors:
            rows += int(lengths[hi])
            hi += 1
        groups.append((lo, hi))
        lo = hi
    return groups


def _score_groups(q, vectors, scales, weights, starts, lengths, groups, out, width: int) -> None:
    """Score candidate groups into `out`: (rows, nq) GEMM per group, then a per-page max."""
    nq, dim = q.shape
    device = vectors.device
    # buffers reused across groups: converting into warm memory is ~3x cheaper than allocating
    convert = None if vectors.dtype == torch.float32 else torch.empty((width, dim), dtype=torch.float32, device=device)
    sims_buffer = torch.empty((width, nq), dtype=torch.float32, device=device)
    q_t = q.T  # (dim, nq): rows x queries is the faster GEMM orientation here (tall-skinny output)
    for group_start, group_end in groups:
        g_starts, g_lengths = starts[group_start:group_end], lengths[group_start:group_end]
        rows = int(g_lengths.sum())
        if rows == 0:
            continue
        if np.all(g_starts[1:] == g_starts[:-1] + g_lengths[:-1]):  # contiguous pages: a slice, no gather
            first = int(g_starts[0])
            block = vectors[first:first + rows]
            block_scales = None if scales is None else scales[first:first + rows]
        else:
            rows_idx = torch.from_numpy(_gather_rows(g_starts, g_lengths)).to(device)
            block = vectors.index_select(0, rows_idx)
            block_scales = None if scales is None else scales.index_select(0, rows_idx)
        if convert is not None:
            block = convert[:rows].copy_(block)  # (rows, dim) fp32
        sims = torch.mm(block, q_t, out=sims_buffer[:rows])  # (rows, nq)
        if block_scales is not None:
            sims.mul_(block_scales[:, None])  # int8: v = q * scale, applied to the similarity rows
        n_pages = group_end - group_start
        if np.all(g_lengths == g_lengths[0]):
            best = sims.view(n_pages, int(g_lengths[0]), nq).amax(dim=1)  # (pages, nq)
        else:  # ragged: pad each page to the longest with -inf, then max
            longest = int(g_lengths.max())
            padded = torch.cat([sims, torch.full((1, nq), float("-inf"), device=device)], dim=0)
            local = np.concatenate([[0], np.cumsum(g_lengths)[:-1]])
            cols = local[:, None] + np.arange(longest)[None, :]  # (pages, longest)
            cols = np.where(np.arange(longest)[None, :] < g_lengths[:, None], cols, rows)
            best = padded[torch.from_numpy(cols.reshape(-1)).to(device)].view(n_pages, longest, nq).amax(dim=1)
            best = torch.where(torch.from_numpy(g_lengths == 0).to(device)[:, None], torch.zeros_like(best), best)
        if weights is not None:
            best = best * weights
        out[group_start:group_end] = best.sum(dim=1)


def _maxsim_torch(query, vectors, offsets, page_ids, scales, query_weights, block_vectors: int,
                  threads: int | None) -> torch.Tensor:
    device = vectors.device  # CPU memmaps, or tensors on a GPU: every operand joins the vectors there
    q = query.to(device).float().contiguous()  # (nq, dim)
    offsets_np = offsets.cpu().numpy().astype(np.int64)
    ids = page_ids.cpu().numpy()
    starts = offsets_np[ids]
    lengths = offsets_np[ids + 1] - starts
    out = torch.zeros(len(ids), dtype=torch.float32, device=device)
    weights = None if query_weights is None else query_weights.to(device)[None, :]  # (1, nq)
    groups = _groups(lengths, block_vectors)
    width = max(int(block_vectors), int(lengths.max()) if len(lengths) else 0)
    threads = 1 if device.type != "cpu" else min(threads or torch.get_num_threads(), len(groups))
    if threads <= 1:
        _score_groups(q, vectors, scales, weights, starts, lengths, groups, out, width)
        return out
    # Our own threads, each running torch single-threaded on its share of the groups: one
    # OpenMP team per small op would hit a barrier per op, and on a loaded machine every barrier
    # waits for a descheduled thread. torch.set_num_threads is per thread, so the caller's
    # setting is untouched; torch ops release the GIL.
    from concurrent.futures import ThreadPoolExecutor

    cuts = np.linspace(0, len(groups), threads + 1).astype(int)

    def work(part: int) -> None:
        torch.set_num_threads(1)
        _score_groups(q, vectors, scales, weights, starts, lengths, groups[cuts[part]:cuts[part + 1]], out, width)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(work, range(threads)))
    return out


def maxsim(query, vectors, offsets, *, page_ids=None, scales=None, query_weights=None, backend: str = "auto",
           block_vectors: int = 8192, threads: int | None = None) -> torch.Tensor:
    """MaxSim scores of one query against the listed pages.

    Args:
        query: (nq, dim) query vectors (float).
        vectors: (total, dim) page vectors, float32/float16/bfloat16/int8 (numpy, memmap or torch).
        offsets: (num_pages + 1,) int row offsets; page p is rows offsets[p]:offsets[p+1].
        page_ids: (m,) pages to score (default: all); only their rows are read.
        scales: (total,) float32 per-vector scale, required for int8 vectors.
        query_weights: (nq,) weight of each query vector (default 1).
        backend: "auto", "reference", "torch" or "triton".
        block_vectors: CPU path: page rows per matmul block.
        threads: CPU path: worker threads (default: torch.get_num_threads()).

    Returns:
        (m,) float32 scores, in page_ids order (on the vectors' device).
    """
    if backend not in MAXSIM_BACKENDS:
        raise ValueError(f"unknown MaxSim backend {backend!r}; choose one of {', '.join(MAXSIM_BACKENDS)}")
    checked = _check(query, vectors, offsets, page_ids, scales, query_weights)
    if backend == "auto":
        backend = "triton" if checked[1].is_cuda else "torch"
    if backend == "reference":
        return maxsim_reference(*checked[:3], page_ids=checked[3], scales=checked[4], query_weights=checked[5])
    if backend == "triton":
        from .maxsim_triton import maxsim_triton

        return maxsim_triton(*checked)
    return _maxsim_torch(*checked, block_vectors=block_vectors, threads=threads)
