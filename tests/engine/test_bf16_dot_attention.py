"""The `vdpbf16ps` kernels: bf16 continued prefill (kernels/prefill_attention_bf16.py) against float64 attention and
torch's flash path, and bf16 decode (kernels/decode_attention_bf16.py) against the widening numba kernel.

They run only where they compile and are chosen: a CPU with AVX512-BF16 and no AMX (AMD Zen 4/5). Elsewhere these
tests skip with that reason, and the engine keeps torch's flash kernel and the widening decode kernel
(tests/engine/test_attention.py covers both).
"""

import pytest
import torch

from kernels import bf16_dot
from kernels import prefill_attention_bf16 as kernel

pytestmark = pytest.mark.skipif(not bf16_dot.available(),
                                reason="needs a CPU with AVX512-BF16 and no AMX, numba compiling for it")

# Both paths multiply exact bf16 values into float32 sums and round the probabilities and the output to bf16: the
# output's rounding is at most 2**-8 of a value (|v| < ~4 here), the probabilities' 2**-8 of each weight.
MAX_ERROR = 2e-2
MEAN_ERROR = 1e-3


def attention64(q, k, v):
    """Float64 causal attention of the chunk q (heads, length, D) at the end of k, v (kv_heads, kv_len, D)."""
    heads, length, dim = q.shape
    kv_heads, kv_len, _ = k.shape
    k, v = k.double().repeat_interleave(heads // kv_heads, 0), v.double().repeat_interleave(heads // kv_heads, 0)
    scores = q.double() @ k.transpose(1, 2) * dim**-0.5
    visible = torch.arange(kv_len)[None] <= torch.arange(kv_len - length, kv_len)[:, None]
    return torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ v


def chunk(heads, kv_heads, dim, length, kv_len, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (1.5 * torch.randn(heads, length, dim, generator=g)).bfloat16()
    k = (1.5 * torch.randn(kv_heads, kv_len, dim, generator=g)).bfloat16()
    v = torch.randn(kv_heads, kv_len, dim, generator=g).bfloat16()
    return q, k, v


def differences(got, want):
    diff = (got.double() - want).abs()
    return diff.max().item(), diff.mean().item()


@pytest.mark.parametrize("heads, kv_heads, dim, length, kv_len", [
    (9, 3, 64, 90, 1500),  # SmolLM2's grouping, a serve turn after a long context
    (9, 3, 64, 1, 33),  # one row; keys one past a tile
    (9, 3, 64, 7, 7),  # no cached context: the chunk alone, causal
    (12, 2, 128, 64, 364),  # Qwen2.5-1.5B's grouping and head size
    (4, 4, 64, 13, 301),  # no grouping, an odd key count (the last value pair half empty)
])
def test_the_kernel_equals_float64_attention_within_bf16_rounding(heads, kv_heads, dim, length, kv_len):
    q, k, v = chunk(heads, kv_heads, dim, length, kv_len)
    got = kernel.continued_prefill_bf16(q, k, v)
    assert got.dtype == torch.bfloat16 and got.shape == (heads, length, dim)
    worst, mean = differences(got, attention64(q, k, v))
    assert worst < MAX_ERROR and mean < MEAN_ERROR, f"max {worst:.2e}, mean {mean:.2e}"


def test_the_kernel_is_at_least_as_close_as_torchs_flash_path():
    """The same arithmetic as the flash kernel it replaces (bf16 products in float32 sums, bf16 probabilities)."""
    from engine.core.attention_cpu import _FLASH, _continued_prefill

    if _FLASH is None:
        pytest.skip("this torch has no CPU flash kernel to compare with")
    q, k, v = chunk(9, 3, 64, 90, 1500, seed=1)
    want = attention64(q, k, v)
    ours = differences(kernel.continued_prefill_bf16(q, k, v), want)
    flash = differences(_continued_prefill(q, k, v), want)
    assert ours[1] <= 1.1 * flash[1], f"mean error {ours[1]:.2e} against the flash path's {flash[1]:.2e}"


def test_the_paged_cache_read_in_place_equals_the_gathered_context():
    """Scattered blocks of 16 slots, the last one partly filled: the packing follows the block table."""
    heads, kv_heads, dim, length, kv_len, block_size = 9, 3, 64, 20, 150, 16
    q, k, v = chunk(heads, kv_heads, dim, length, kv_len, seed=2)
    blocks = -(-kv_len // block_size)
    table = torch.randperm(3 * blocks, generator=torch.Generator().manual_seed(4))[:blocks]
    k_cache = torch.full((3 * blocks, block_size, kv_heads, dim), float("nan"), dtype=torch.bfloat16)
    v_cache = k_cache.clone()  # unwritten slots are NaN: any read of one would show in the output
    for position in range(kv_len):
        k_cache[table[position // block_size], position % block_size] = k[:, position]
        v_cache[table[position // block_size], position % block_size] = v[:, position]
    paged = kernel.paged_prefill_bf16(q, k_cache, v_cache, table, kv_len)
    assert torch.equal(paged, kernel.continued_prefill_bf16(q, k, v))


@pytest.mark.parametrize("backend", ["numba", "sdpa"])
def test_the_numba_backend_takes_the_kernel_for_bf16_chunks_over_a_cache(monkeypatch, backend):
    """A step through a CPU backend: a prompt from 0, two chunks after cached prefixes and a decode row. On `numba`
    the two chunks go through the kernel (and only they); `sdpa`, the torch reference, never takes it. Every row
    equals float32 attention over the same bf16 cache."""
    import numpy as np

    from engine.core.attention import PagedAttention, make_backend
    from engine.core.step_layout import StepLayout, pack_to_device
    from kernels.paged_attention import paged_attention_reference
    from models.base import ModelShape
    from tests.kernels._paged_attention_cases import build

    lengths, block_size = [(12, 12), (20, 70), (1, 40), (30, 95)], 16  # chunks longer than numba's 16 decode rows
    q, k_cache, v_cache, cu, context, tables = build(torch.bfloat16, 6, 2, 64, block_size, lengths, seed=5)
    positions = torch.cat([torch.arange(c - n, c) for n, c in lengths])
    seq_of_row = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor([n for n, _ in lengths]))
    slots = tables[seq_of_row, positions // block_size].long() * block_size + positions % block_size
    k, v = k_cache.view(-1, 2, 64)[slots].clone(), v_cache.view(-1, 2, 64)[slots].clone()
    layout = StepLayout(
        input_ids=np.zeros(len(q), np.int64), positions=positions.numpy(), slot_mapping=slots.numpy(),
        cu_seqlens_q=cu.numpy(), context_lens=context.numpy(), block_tables=tables.numpy(),
        sample_rows=(cu[1:] - 1).numpy().astype(np.int64), max_q_len=30, max_context_len=95)
    shape = ModelShape(num_layers=1, num_kv_heads=2, head_dim=64, vocab_size=1, max_positions=4096)
    attention = make_backend(backend, shape, block_size, torch.device("cpu"), torch.bfloat16)
    tensors = pack_to_device({"slot_mapping": layout.slot_mapping, **attention.arrays(layout)}, torch.device("cpu"))
    chunks = []
    real = kernel.paged_prefill_bf16
    monkeypatch.setattr(kernel, "paged_prefill_bf16", lambda q, *rest: chunks.append(q.shape[1]) or real(q, *rest))
    got = PagedAttention(k_cache[None], v_cache[None], attention.metadata(tensors, layout), attention)(0, q, k, v)
    assert chunks == ([20, 30] if backend == "numba" else [])  # the prompt from 0 stays on SDPA
    want = paged_attention_reference(q.float(), k_cache.float(), v_cache.float(), cu, context, tables)
    diff = (got.double() - want.double()).abs()
    assert diff.max() < MAX_ERROR and diff.mean() < MEAN_ERROR, f"max {diff.max():.2e}, mean {diff.mean():.2e}"


@pytest.mark.parametrize("dim, kv_heads, group, block_size, stacked", [
    (64, 3, 3, 16, 1),  # SmolLM2
    (128, 2, 6, 32, 1),  # Qwen2.5-1.5B's heads, blocks of 32
    (64, 3, 3, 16, 4),  # a reply and 3 draft rows stacked: each row sees the keys up to itself
    (32, 1, 8, 16, 1),
    (256, 1, 2, 16, 1),
])
def test_the_decode_kernel_equals_the_widening_kernel(dim, kv_heads, group, block_size, stacked):
    """Same softmax and values code, scores summed in another order: the float32 outputs differ by rounding, so
    the bf16 outputs are equal or one last place apart. Unwritten cache slots are NaN, so a tile that read one into
    a kept score would show."""
    import numpy as np

    from kernels.decode_attention_bf16 import applies
    from kernels.paged_attention_numba import paged_decode_bf16, paged_decode_torch

    assert applies(block_size, dim, None) and not applies(block_size, dim, 4) and not applies(8, dim, None)
    g = torch.Generator().manual_seed(dim + stacked)
    lens = torch.tensor([stacked, 17, 300, 511], dtype=torch.int64)  # a stack of rows has at least as many keys
    width = int(-(-lens.max() // block_size))
    pool = len(lens) * width + 3
    tables = torch.randperm(pool, generator=g)[: len(lens) * width].view(len(lens), width)
    k_cache = torch.full((pool, block_size, kv_heads, dim), float("nan"), dtype=torch.bfloat16)
    v_cache = k_cache.clone()
    for b, length in enumerate(lens.tolist()):
        for position in range(length):
            block, slot = tables[b, position // block_size], position % block_size
            k_cache[block, slot] = torch.randn(kv_heads, dim, generator=g).bfloat16()
            v_cache[block, slot] = torch.randn(kv_heads, dim, generator=g).bfloat16()
    q = torch.randn(len(lens), kv_heads, group * stacked, dim, generator=g).bfloat16()
    got = paged_decode_torch(q, k_cache, v_cache, tables, lens, rows=stacked)  # takes the dot kernel here
    want = torch.empty(q.shape)
    bits = lambda cache: cache.view(torch.int16).numpy().view(np.uint16)
    paged_decode_bf16(q.float().numpy(), bits(k_cache), bits(v_cache), tables.numpy(), lens.numpy(),
                      np.zeros(len(lens), dtype=np.int64), np.float32(dim**-0.5), want.numpy(), stacked)
    assert not got.isnan().any()
    diff = (got.float() - want.bfloat16().float()).abs()  # both rounded to bf16 once: at most one last place apart
    assert diff.max() <= 2**-8 * want.abs().max() + 1e-5, f"max {diff.max():.2e}, mean {diff.mean():.2e}"
    assert diff.mean() < 1e-4, f"max {diff.max():.2e}, mean {diff.mean():.2e}"
