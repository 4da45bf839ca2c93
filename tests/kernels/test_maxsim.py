"""MaxSim: the CPU fast path against the einsum reference, and the reference against colpali's formula."""

import numpy as np
import pytest
import torch

from kernels.maxsim import einsum_maxsim_padded, maxsim, maxsim_reference

REL_TOL_FP32 = 1e-5  # fp32 storage: only summation order differs
REL_TOL_LOW = 1e-3  # fp16/bf16/int8 storage: both sides dequantize the same stored values


def _ragged(seed: int, lengths: list[int], dim: int = 48):
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor(lengths), 0)
    vectors = torch.nn.functional.normalize(torch.randn(int(offsets[-1]), dim, generator=gen), dim=-1)
    query = torch.nn.functional.normalize(torch.randn(9, dim, generator=gen), dim=-1)
    return query, vectors, offsets


def _store(vectors: torch.Tensor, dtype: str):
    if dtype == "int8":
        scales = vectors.abs().amax(dim=1) / 127.0
        return torch.round(vectors / scales[:, None]).to(torch.int8), scales
    return vectors.to(getattr(torch, dtype)), None


def _assert_close(ref, got, tol, label):
    rel = (got - ref).abs() / ref.abs().clamp_min(1e-6)
    assert rel.max() <= tol, f"{label}: rel diff max {rel.max():.3g} mean {rel.mean():.3g}"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8"])
def test_torch_backend_equals_reference_on_ragged_pages(dtype):
    lengths = [5, 0, 130, 64, 64, 1, 300, 17, 64]
    query, vectors, offsets = _ragged(1, lengths)
    stored, scales = _store(vectors, dtype)
    weights = torch.tensor([1, 0, 1, 1, 0.5, 1, 1, 0, 1], dtype=torch.float32)
    for page_ids in (None, torch.tensor([6, 1, 3, 0, 8, 2])):  # all pages; a shuffled subset
        ref = maxsim_reference(query, stored, offsets, page_ids=page_ids, scales=scales, query_weights=weights)
        for block in (64, 200, 8192):  # groups of one page, a few pages, everything
            got = maxsim(query, stored, offsets, page_ids=page_ids, scales=scales, query_weights=weights,
                         backend="torch", block_vectors=block)
            _assert_close(ref, got, REL_TOL_FP32 if dtype == "float32" else 1e-5, f"{dtype} block {block}")
    empty = maxsim(query, stored, offsets, page_ids=torch.tensor([1]), scales=scales)
    assert empty.tolist() == [0.0]


def test_reference_is_colpali_formula_on_equal_length_pages():
    query, vectors, offsets = _ragged(2, [40] * 6)
    colpali = einsum_maxsim_padded(query[None], vectors.view(6, 40, -1))[0]
    _assert_close(colpali, maxsim_reference(query, vectors, offsets), REL_TOL_FP32, "reference vs colpali")
    _assert_close(colpali, maxsim(query, vectors, offsets), REL_TOL_FP32, "torch vs colpali")


def test_acceptance_shape_fp16_matches_einsum():
    """32 query vectors x 100 pages x 768 vectors x 128 dims, fp16 storage, vs colpali's einsum."""
    gen = torch.Generator().manual_seed(3)
    pages = torch.nn.functional.normalize(torch.randn(100, 768, 128, generator=gen), dim=-1).half()
    query = torch.nn.functional.normalize(torch.randn(32, 128, generator=gen), dim=-1)
    offsets = torch.arange(101, dtype=torch.int64) * 768
    colpali = einsum_maxsim_padded(query[None], pages)[0]
    got = maxsim(query, pages.view(-1, 128), offsets)
    _assert_close(colpali, got, REL_TOL_LOW, "fp16 acceptance shape")


def test_numpy_memmap_pages_and_only_candidates_are_read(tmp_path):
    query, vectors, offsets = _ragged(4, [30, 50, 20, 10])
    path = tmp_path / "vectors.f16"
    stored = np.memmap(path, dtype=np.float16, mode="w+", shape=tuple(vectors.shape))
    stored[:] = vectors.numpy()
    stored.flush()
    readonly = np.memmap(path, dtype=np.float16, mode="r", shape=tuple(vectors.shape))
    ref = maxsim_reference(query, torch.from_numpy(np.array(readonly)), offsets, page_ids=torch.tensor([2, 0]))
    _assert_close(ref, maxsim(query, readonly, offsets.numpy(), page_ids=np.array([2, 0])), 1e-5, "memmap")
    # poison the rows of pages 1 and 3: scores of pages 2 and 0 must not change
    poisoned = readonly.copy()
    poisoned[30:80] = np.nan
    poisoned[100:] = np.nan
    again = maxsim(query, poisoned, offsets.numpy(), page_ids=np.array([2, 0]))
    assert torch.equal(again, maxsim(query, readonly, offsets.numpy(), page_ids=np.array([2, 0])))


def test_bad_input_is_reported():
    query, vectors, offsets = _ragged(5, [4, 4])
    with pytest.raises(ValueError, match="share dim"):
        maxsim(query[:, :10], vectors, offsets)
    with pytest.raises(ValueError, match="page_ids must lie"):
        maxsim(query, vectors, offsets, page_ids=torch.tensor([2]))
    with pytest.raises(ValueError, match="need per-vector"):
        maxsim(query, vectors.to(torch.int8), offsets)
    with pytest.raises(ValueError, match="unknown MaxSim backend"):
        maxsim(query, vectors, offsets, backend="cuda")
