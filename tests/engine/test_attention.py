"""The numba decode kernel against the SDPA reference over a paged cache; sliding windows on both paths."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernels.paged_attention_numba import paged_decode_jit_ready, paged_decode_torch
from engine.core.step_layout import StepLayout, pack_to_device

ATOL = 2e-6  # float32, summation order differs from SDPA


def reference(q, k_cache, v_cache, block_tables, lens, window=None):
    batch, kv_heads, group, dim = q.shape
    span = block_tables.shape[1] * k_cache.shape[1]
    keys = k_cache[block_tables].view(batch, span, kv_heads, dim).transpose(1, 2)
    values = v_cache[block_tables].view(batch, span, kv_heads, dim).transpose(1, 2)
    mask = torch.arange(span)[None] < lens[:, None]
    if window is not None:
        mask &= torch.arange(span)[None] >= lens[:, None] - window
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None, None, :])


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


@pytest.mark.parametrize("window", [1, 3, 9])
def test_numba_decode_honours_a_sliding_window(window):
    q, k_cache, v_cache, tables, lens = case(6, 2, 2, 16, 4, seed=window)
    got = paged_decode_torch(q, k_cache, v_cache, tables, lens, window)
    want = reference(q, k_cache, v_cache, tables, lens, window)
    diff = (got - want).abs()
    assert diff.max() < ATOL, f"max diff {diff.max():.2e}, mean {diff.mean():.2e}"
    assert (got - paged_decode_torch(q, k_cache, v_cache, tables, lens)).abs().max() > 1e-3, "the window changed nothing"


def test_plain_python_source_is_the_same_kernel():
    q, k_cache, v_cache, tables, lens = case(2, 2, 2, 8, 4, seed=3)
    out = np.empty(q.shape, dtype=np.float32)
    paged_decode_jit_ready(q.numpy(), k_cache.numpy(), v_cache.numpy(), tables.numpy(), lens.numpy(),
                           np.zeros_like(lens.numpy()), np.float32(8 ** -0.5), out)
    diff = np.abs(out - paged_decode_torch(q, k_cache, v_cache, tables, lens).numpy())
    assert diff.max() < ATOL, f"max diff {diff.max():.2e}, mean {diff.mean():.2e}"


def dense_attention(q, k, v, first_query: int, window: int | None) -> torch.Tensor:
    """Rows first_query.. of causal (optionally sliding-window) attention over a whole sequence; q (n, heads, D)."""
    n, heads, dim = q.shape
    group = heads // k.shape[1]
    keys, values = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    query_pos = torch.arange(first_query, n).unsqueeze(1)
    key_pos = torch.arange(n).unsqueeze(0)
    mask = key_pos <= query_pos
    if window is not None:
        mask &= key_pos > query_pos - window
    out = F.scaled_dot_product_attention(q[first_query:].transpose(0, 1), keys.transpose(0, 1),
                                         values.transpose(0, 1), attn_mask=mask)
    return out.transpose(0, 1)


def run_layer(backend_name, layout, k_cache, v_cache, q, k, v, window):
    """One layer of one step, as the model runner runs it: layout -> one packed copy -> metadata -> attention."""
    from engine.core.attention import PagedAttention, make_backend
    from models.base import ModelShape

    shape = ModelShape(num_layers=1, num_kv_heads=k_cache.shape[3], head_dim=k_cache.shape[4], vocab_size=1,
                       max_positions=4096)
    backend = make_backend(backend_name, shape, k_cache.shape[2], torch.device("cpu"), torch.float32)
    tensors = pack_to_device({"slot_mapping": layout.slot_mapping, **backend.arrays(layout)}, torch.device("cpu"))
    meta = backend.metadata(tensors, layout)
    return PagedAttention(k_cache, v_cache, meta, backend)(0, q, k, v, window=window)


@pytest.mark.parametrize("backend", ["sdpa", "numba"])
@pytest.mark.parametrize("window", [None, 1, 5, 64])
def test_paged_attention_honours_a_per_call_window(backend, window):
    """A prefill chunk at the end of a longer context and a decode token in one packed batch, with a window."""
    g = torch.Generator().manual_seed(7)
    heads, kv_heads, dim, block_size = 4, 2, 8, 4
    k_cache = torch.zeros(1, 32, block_size, kv_heads, dim)
    v_cache = torch.zeros_like(k_cache)
    perm = torch.randperm(32, generator=g)
    lengths, starts = (23, 18), (10, 17)  # sequence A prefills rows 10..22, sequence B decodes row 17
    tables = [perm[:6], perm[6:11]]
    full = [(torch.randn(n, heads, dim, generator=g), torch.randn(n, kv_heads, dim, generator=g),
             torch.randn(n, kv_heads, dim, generator=g)) for n in lengths]

    def slots(table, rows):
        return [int(table[i // block_size]) * block_size + i % block_size for i in rows]

    for (_, k, v), table, start in zip(full, tables, starts):  # the cached part of each context
        cached = torch.tensor(slots(table, range(start)))
        k_cache[0].view(-1, kv_heads, dim)[cached] = k[:start]
        v_cache[0].view(-1, kv_heads, dim)[cached] = v[:start]
    new = [slice(start, n) for start, n in zip(starts, lengths)]
    padded = torch.zeros(2, 6, dtype=torch.int32)
    padded[0], padded[1, :5] = tables[0][:6], tables[1]
    layout = StepLayout(
        input_ids=np.zeros(14, np.int64), positions=np.zeros(14, np.int64),
        slot_mapping=np.array(slots(tables[0], range(10, 23)) + slots(tables[1], [17]), np.int64),
        cu_seqlens_q=np.array([0, 13, 14], np.int32), context_lens=np.array([23, 18], np.int32),
        block_tables=padded.numpy(), sample_rows=np.array([12, 13], np.int64), max_q_len=13, max_context_len=23,
    )
    q, k, v = (torch.cat([part[i][rows] for part, rows in zip(full, new)]) for i in range(3))
    got = run_layer(backend, layout, k_cache, v_cache, q, k, v, window)
    want = torch.cat([dense_attention(*part, start, window) for part, start in zip(full, starts)])
    diff = (got - want).abs()
    assert diff.max() < ATOL, f"max diff {diff.max():.2e}, mean {diff.mean():.2e}"
