"""The numba decode kernel against the SDPA reference over a paged cache."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.core.cpu_attention import paged_decode_jit_ready, paged_decode_torch

ATOL = 2e-6  # float32, summation order differs from SDPA


def reference(q, k_cache, v_cache, block_tables, lens):
    batch, kv_heads, group, dim = q.shape
    span = block_tables.shape[1] * k_cache.shape[1]
    keys = k_cache[block_tables].view(batch, span, kv_heads, dim).transpose(1, 2)
    values = v_cache[block_tables].view(batch, span, kv_heads, dim).transpose(1, 2)
    mask = (torch.arange(span)[None] < lens[:, None])[:, None, None, :]
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


def case(batch, kv_heads, group, dim, block_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    blocks = 64
    k_cache = torch.randn(blocks, block_size, kv_heads, dim, generator=g)
    v_cache = torch.randn(blocks, block_size, kv_heads, dim, generator=g)
    lens = torch.randint(1, 6 * block_size, (batch,), generator=g)
    width = int((lens.max() + block_size - 1) // block_size)
    tables = torch.stack([torch.randperm(blocks, generator=g)[:width] for _ in range(batch)])
    q = torch.randn(batch, kv_heads, group, dim, generator=g)
    return q, k_cache, v_cache, tables, lens


@pytest.mark.parametrize("shape", [(5, 2, 2, 16, 4), (3, 3, 3, 64, 16), (4, 1, 4, 32, 8), (2, 4, 1, 8, 4)])
def test_numba_decode_matches_sdpa(shape):
    q, k_cache, v_cache, tables, lens = case(*shape)
    got = paged_decode_torch(q, k_cache, v_cache, tables, lens)
    want = reference(q, k_cache, v_cache, tables, lens)
    diff = (got - want).abs()
    assert diff.max() < ATOL, f"max diff {diff.max():.2e}, mean {diff.mean():.2e}"


def test_plain_python_source_is_the_same_kernel():
    q, k_cache, v_cache, tables, lens = case(2, 2, 2, 8, 4, seed=3)
    out = np.empty(q.shape, dtype=np.float32)
    paged_decode_jit_ready(q.numpy(), k_cache.numpy(), v_cache.numpy(), tables.numpy(), lens.numpy(),
                           np.float32(8 ** -0.5), out)
    diff = np.abs(out - paged_decode_torch(q, k_cache, v_cache, tables, lens).numpy())
    assert diff.max() < ATOL, f"max diff {diff.max():.2e}, mean {diff.mean():.2e}"
