"""The numba decode kernel (float32, bf16) vs the SDPA reference over a paged cache; sliding windows on both paths."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernels.paged_attention_numba import paged_decode_bf16_jit_ready, paged_decode_jit_ready, paged_decode_torch
from engine.core.step_layout import StepLayout, pack_to_device

ATOL = 2e-6  # float32, summation order differs from SDPA
# bf16 kernel vs float32 attention over the same bf16 values: the sums are float32 (ATOL, with slack for the
# longer bf16 cases), then one rounding of the output to bf16, at most 2**-8 of the value (8-bit significand).
BF16_OUTPUT_RTOL = 2**-8
BF16_ATOL = 1e-5


def reference(q, k_cache, v_cache, block_tables, lens, window=None):
    batch, kv_heads, group, dim = q.shape
    span = block_tables.shape[1] * k_cache.shape[1]
    keys = k_cache[block_tables].view(batch, span, kv_heads, dim).transpose(1, 2)
    values = v_cache[block_tables].view(batch, span, kv_heads, dim).transpose(1, 2)
    mask = torch.arange(span)[None] < lens[:, None]
    if window is not None:
        mask &= torch.arange(span)[None] >= lens[:, None] - window
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None, None, :])


def case(batch, kv_heads, group, dim, block_size, seed=0, dtype=torch.float32, max_blocks=6):
    g = torch.Generator().manual_seed(seed)
    blocks = max(64, max_blocks + 1)
    k_cache = torch.randn(blocks, block_size, kv_heads, dim, generator=g).to(dtype)
    v_cache = torch.randn(blocks, block_size, kv_heads, dim, generator=g).to(dtype)
    lens = torch.randint(1, max_blocks * block_size, (batch,), generator=g)
    width = int((lens.max() + block_size - 1) // block_size)
    tables = torch.stack([torch.randperm(blocks, generator=g)[:width] for _ in range(batch)])
    q = torch.randn(batch, kv_heads, group, dim, generator=g).to(dtype)
    return q, k_cache, v_cache, tables, lens


def assert_bf16_close(got, want, label):
    """`got` (bf16) within one output rounding of the float32 attention `want`."""
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    diff = (got.float() - want).abs()
    limit = BF16_OUTPUT_RTOL * want.abs() + BF16_ATOL
    worst = (diff - limit).argmax()
    assert (diff <= limit).all(), (f"{label}: max diff {diff.max():.3g}, mean {diff.mean():.3g}; worst element "
                                   f"{got.flatten()[worst].item():.6g} vs {want.flatten()[worst].item():.6g}")


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


# (batch, kv_heads, group, head_dim, block_size, max_blocks, window): block tables 1 to 40 blocks wide, one
# sequence or several of different lengths, MHA and GQA up to Qwen2.5-1.5B's 6 query heads per KV head
BF16_CASES = {
    "one_block_mha": (3, 4, 1, 16, 4, 1, None),
    "gqa2_scattered": (5, 2, 2, 16, 4, 6, None),
    "gqa4_block8": (4, 1, 4, 32, 8, 9, None),
    "qwen_gqa6_d128_long": (1, 2, 6, 128, 16, 40, None),
    "batch8_gqa3": (8, 3, 3, 64, 16, 12, None),
    "gqa2_window": (6, 2, 2, 16, 4, 6, 5),
}


@pytest.mark.parametrize("name", list(BF16_CASES))
def test_numba_bf16_decode_matches_float32_attention(name):
    """bf16 caches read in place, float32 sums: float32 SDPA over the same bf16 values, to one output rounding."""
    batch, kv_heads, group, dim, block_size, max_blocks, window = BF16_CASES[name]
    q, k_cache, v_cache, tables, lens = case(batch, kv_heads, group, dim, block_size, seed=len(name),
                                             dtype=torch.bfloat16, max_blocks=max_blocks)
    got = paged_decode_torch(q, k_cache, v_cache, tables, lens, window)
    want = reference(q.float(), k_cache.float(), v_cache.float(), tables, lens, window)
    assert_bf16_close(got, want, name)


def test_numba_bf16_decode_is_closer_to_float32_than_sdpa_in_bf16():
    """Summing in float32 is the point: bf16 SDPA (which rounds along the way) is no closer to the float32 result."""
    q, k_cache, v_cache, tables, lens = case(4, 2, 6, 128, 16, seed=11, dtype=torch.bfloat16, max_blocks=40)
    want = reference(q.float(), k_cache.float(), v_cache.float(), tables, lens)
    ours = (paged_decode_torch(q, k_cache, v_cache, tables, lens).float() - want).abs().mean()
    sdpa = (reference(q, k_cache, v_cache, tables, lens).float() - want).abs().mean()
    assert ours <= sdpa, f"numba bf16 mean diff {ours:.3g} vs sdpa bf16 {sdpa:.3g}"


def test_plain_python_source_is_the_same_bf16_kernel():
    q, k_cache, v_cache, tables, lens = case(2, 2, 3, 8, 4, seed=5, dtype=torch.bfloat16)
    out = np.empty(q.shape, dtype=np.float32)
    bits = [cache.view(torch.int16).numpy().view(np.uint16) for cache in (k_cache, v_cache)]
    paged_decode_bf16_jit_ready(q.float().numpy(), *bits, tables.numpy(), lens.numpy(), np.zeros_like(lens.numpy()),
                                np.float32(8 ** -0.5), out, 1)
    assert_bf16_close(paged_decode_torch(q, k_cache, v_cache, tables, lens), torch.from_numpy(out), "plain python")


def test_plain_python_source_is_the_same_kernel():
    q, k_cache, v_cache, tables, lens = case(2, 2, 2, 8, 4, seed=3)
    out = np.empty(q.shape, dtype=np.float32)
    paged_decode_jit_ready(q.numpy(), k_cache.numpy(), v_cache.numpy(), tables.numpy(), lens.numpy(),
                           np.zeros_like(lens.numpy()), np.float32(8 ** -0.5), out, 1)
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


def make_cpu_backend(backend_name, k_cache):
    """The named CPU backend for a one-layer cache (1, blocks, block_size, kv_heads, D), float32."""
    from engine.core.attention import make_backend
    from models.base import ModelShape

    shape = ModelShape(num_layers=1, num_kv_heads=k_cache.shape[3], head_dim=k_cache.shape[4], vocab_size=1,
                       max_positions=4096)
    return make_backend(backend_name, shape, k_cache.shape[2], torch.device("cpu"), torch.float32)


def run_layer(backend_name, layout, k_cache, v_cache, q, k, v, window):
    """One layer of one step, as the model runner runs it: layout -> one packed copy -> metadata -> attention."""
    from engine.core.attention import PagedAttention

    backend = make_cpu_backend(backend_name, k_cache)
    tensors = pack_to_device({"slot_mapping": layout.slot_mapping, **backend.arrays(layout)}, torch.device("cpu"))
    meta = backend.metadata(tensors, layout)
    return PagedAttention(k_cache, v_cache, meta, backend)(0, q, k, v, window=window)


@pytest.mark.parametrize("backend", ["sdpa", "numba"])
@pytest.mark.parametrize("window", [None, 1, 5, 64])
@pytest.mark.parametrize("first", [10, 2, 21])
def test_paged_attention_honours_a_per_call_window(backend, window, first):
    """A chunk at the end of a longer context and a decode token in one packed batch, with a window. The chunk
    has 13, 21 or 2 rows: numba attends chunks of up to 16 rows row by row on its decode kernel (a reply with
    draft tokens), longer ones as prefills."""
    g = torch.Generator().manual_seed(7)
    heads, kv_heads, dim, block_size = 4, 2, 8, 4
    k_cache = torch.zeros(1, 32, block_size, kv_heads, dim)
    v_cache = torch.zeros_like(k_cache)
    perm = torch.randperm(32, generator=g)
    lengths, starts = (23, 18), (first, 17)  # sequence A computes rows first..22, sequence B decodes row 17
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
        input_ids=np.zeros(24 - first, np.int64), positions=np.zeros(24 - first, np.int64),
        slot_mapping=np.array(slots(tables[0], range(first, 23)) + slots(tables[1], [17]), np.int64),
        cu_seqlens_q=np.array([0, 23 - first, 24 - first], np.int32), context_lens=np.array([23, 18], np.int32),
        block_tables=padded.numpy(), sample_rows=np.array([22 - first, 23 - first], np.int64),
        max_q_len=23 - first, max_context_len=23,
    )
    q, k, v = (torch.cat([part[i][rows] for part, rows in zip(full, new)]) for i in range(3))
    if backend == "numba":  # which path each chunk takes: rows of short chunks are decode rows, in row order
        numba = make_cpu_backend("numba", k_cache)
        arrays = numba.arrays(layout)
        rows = arrays["decode_rows"]
        assert rows.tolist() == (list(range(24 - first)) if 23 - first <= 16 else [23 - first])
        # ... and a short chunk's rows are one stacked kernel entry (the decode token another)
        meta = numba.metadata(pack_to_device({"slot_mapping": layout.slot_mapping, **arrays}, torch.device("cpu")),
                              layout)
        stacks = sorted((stack, len(lens)) for stack, _, _, lens in meta.decode_stacks)
        assert stacks == ([(1, 1), (23 - first, 1)] if 23 - first <= 16 else [])
    got = run_layer(backend, layout, k_cache, v_cache, q, k, v, window)
    want = torch.cat([dense_attention(*part, start, window) for part, start in zip(full, starts)])
    diff = (got - want).abs()
    assert diff.max() < ATOL, f"max diff {diff.max():.2e}, mean {diff.mean():.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stacked_rows_equal_one_entry_per_row(dtype):
    """A chunk's rows stacked in one kernel entry (row r seeing the keys up to its own position) give what one
    entry per row gives, in float32 and bf16; the rows differ (a mask that hid nothing would fail)."""
    q, k_cache, v_cache, tables, lens = case(3, 2, 3, 16, 4, seed=11, dtype=dtype, max_blocks=9)
    stack = 5
    lens = lens.clamp(min=stack + 1)
    rows = torch.randn(3, stack, 2, 3, 16, generator=torch.Generator().manual_seed(12)).to(dtype)
    stacked = paged_decode_torch(rows.transpose(1, 2).reshape(3, 2, stack * 3, 16).contiguous(), k_cache, v_cache,
                                 tables, lens, rows=stack).view(3, 2, stack, 3, 16).transpose(1, 2)
    for r in range(stack):
        alone = paged_decode_torch(rows[:, r].contiguous(), k_cache, v_cache, tables, lens - (stack - 1 - r))
        tol = 1e-6 if dtype == torch.float32 else 2**-7
        assert (stacked[:, r].float() - alone.float()).abs().max() <= tol * alone.float().abs().max()
        if r < stack - 1:  # the same query over all the keys is another answer
            everything = paged_decode_torch(rows[:, r].contiguous(), k_cache, v_cache, tables, lens)
            assert (everything.float() - alone.float()).abs().max() > 1e-3


def test_numba_backend_takes_float32_and_bf16_and_refuses_float16():
    from engine.core.attention import resolve_backend
    from tools.errors import DossierError

    assert resolve_backend("numba", "cpu", 16, torch.bfloat16) == "numba"
    assert resolve_backend("numba", "cpu", 16, torch.float32) == "numba"
    # auto: numba for both (bf16 decode measured at least as fast as bf16 SDPA), SDPA for float16
    assert [resolve_backend("auto", "cpu", 16, dtype) for dtype in (torch.float32, torch.bfloat16, torch.float16)] == [
        "numba", "numba", "sdpa"]
    with pytest.raises(DossierError, match="float32 or bfloat16.*torch.float16.*use 'sdpa'"):
        resolve_backend("numba", "cpu", 16, torch.float16)


def test_bf16_engine_on_numba_gives_the_greedy_tokens_of_sdpa(tiny_llama):
    """A bf16 engine (bf16 KV cache, GQA 2) decodes the same tokens through the numba kernel as through SDPA.

    The numba engine decodes the four prompts as one batch; SDPA decodes each prompt alone, because bf16 SDPA
    over a batch pads every sequence to the longest, and the padding changes its rounding (here it changes the
    10th token of the shortest prompt). The numba kernel reads each sequence's own rows, so batching changes
    nothing. Where the two part (bf16 SDPA rounds inside attention, numba sums in float32: on the AMX Xeon the 16th
    token of the longest prompt), the numba engine must be the one that keeps the float32 engine's token.
    """
    from engine import Engine, EngineConfig, SamplingParams
    from tests.engine.conftest import random_prompt

    folder, _ = tiny_llama
    prompts = [random_prompt(n, seed=n) for n in (3, 9, 22, 41)]  # 1 to 11 blocks of 4

    def generate(backend: str, batch: list[list[int]], dtype: str = "bfloat16") -> list[list[int]]:
        # one thread: the thread governor may ask torch for 2 under OMP_THREAD_LIMIT=1, and oneDNN's bf16 matmuls
        # then leave half their output unwritten (torch 2.14), which would make both backends' tokens garbage
        engine = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=256, block_size=4, dtype=dtype,
                                                                  attention_backend=backend, cpu_threads=1))
        assert engine.runner.backend == backend and engine.runner.k_cache.dtype == getattr(torch, dtype)
        requests = []
        for prompt in batch:
            session = engine.open_session()
            session.append(prompt)
            requests.append(engine.submit(session, SamplingParams(max_new_tokens=16, ignore_eos=True)))
        engine.run_until_idle()
        return [r.output_token_ids for r in requests]

    numba = generate("numba", prompts)
    sdpa = [generate("sdpa", [prompt])[0] for prompt in prompts]
    float32 = generate("sdpa", prompts, "float32")
    assert all(len(tokens) == 16 for tokens in numba)
    for ours, theirs, exact, prompt in zip(numba, sdpa, float32, prompts):
        parted = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        if parted is not None:
            assert ours[: parted + 1] == exact[: parted + 1], (
                f"prompt of {len(prompt)}: numba {ours} and sdpa {theirs} part at token {parted}, and numba's token "
                f"is not float32's {exact}")
    # how often bf16 SDPA parts from float32 depends on the CPU: 1 of 4 prompts on the AMX Xeon, 2 on an AVX2 EPYC
    # (bf16 emulated there); numba kept float32's token at every parting, which the loop above holds it to
    assert sum(ours == theirs for ours, theirs in zip(numba, sdpa)) >= 2, (numba, sdpa)


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_a_continued_prefill_without_its_mask_equals_the_masked_attention(dtype, atol):
    """Qwen2.5-1.5B's head grouping (12 query heads on 2 KV heads): a 64-token chunk after 300 cached tokens."""
    from engine.core.attention_cpu import _continued_prefill

    g = torch.Generator().manual_seed(3)
    heads, kv_heads, dim, length, kv_len = 12, 2, 64, 64, 364
    q = torch.randn(heads, length, dim, generator=g)
    k, v = torch.randn(kv_heads, kv_len, dim, generator=g), torch.randn(kv_heads, kv_len, dim, generator=g)
    mask = torch.arange(kv_len)[None] <= torch.arange(kv_len - length, kv_len)[:, None]
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(6, 0), v.repeat_interleave(6, 0), attn_mask=mask)
    got = _continued_prefill(q.to(dtype), k.to(dtype), v.to(dtype))
    assert got.dtype == dtype and got.shape == (heads, length, dim)
    assert (got.float() - want).abs().max() < atol


@pytest.mark.parametrize("backend", ["sdpa", "numba", "invariant"])
@pytest.mark.parametrize("window", [0, 3])
def test_every_cpu_backend_lets_an_image_see_itself_both_ways(backend, window):
    """Bidirectional images (ModelShape.bidirectional_images, Gemma-3) through the step pipeline of each CPU backend:
    an image in a prompt from 0, one in a chunk after a cached prefix, a text-only chunk and a decode row, against
    the float32 reference with the same rule (tests/kernels has the Triton kernel's cases)."""
    from engine.core.attention import PagedAttention, make_backend
    from engine.core.attention_cpu import InvariantNumbaBackend
    from kernels.paged_attention import paged_attention_reference
    from models.base import ModelShape
    from tests.kernels._paged_attention_cases import build, image_spans

    lengths, images = [(12, 12), (9, 30), (6, 14), (1, 17)], [(3, 8), (23, 28), (0, 0), (0, 0)]
    block_size = 4
    q, k_cache, v_cache, cu, context, tables = build(torch.float32, 4, 2, 16, block_size, lengths, seed=3)
    spans = image_spans(lengths, images)
    positions = torch.cat([torch.arange(c - n, c) for n, c in lengths])
    seq_of_row = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor([n for n, _ in lengths]))
    slots = tables[seq_of_row, positions // block_size].long() * block_size + positions % block_size
    k = k_cache.view(-1, 2, 16)[slots].clone()  # this step's K/V: PagedAttention writes them back where they were
    v = v_cache.view(-1, 2, 16)[slots].clone()
    layout = StepLayout(
        input_ids=np.zeros(len(q), np.int64), positions=positions.numpy(), slot_mapping=slots.numpy(),
        cu_seqlens_q=cu.numpy(), context_lens=context.numpy(), block_tables=tables.numpy(),
        sample_rows=(cu[1:] - 1).numpy().astype(np.int64), max_q_len=12, max_context_len=30,
        image_spans=spans.numpy(),
    )
    shape = ModelShape(num_layers=1, num_kv_heads=2, head_dim=16, vocab_size=1, max_positions=4096,
                       bidirectional_images=True)
    device = torch.device("cpu")
    attention = (InvariantNumbaBackend(shape, block_size, device, torch.float32) if backend == "invariant"
                 else make_backend(backend, shape, block_size, device, torch.float32))
    tensors = pack_to_device({"slot_mapping": layout.slot_mapping, "image_spans": layout.image_spans,
                              **attention.arrays(layout)}, device)
    meta = attention.metadata(tensors, layout)
    got = PagedAttention(k_cache[None], v_cache[None], meta, attention)(0, q, k, v, window=window or None)
    want = paged_attention_reference(q, k_cache, v_cache, cu, context, tables, window=window, image_spans=spans)
    causal = paged_attention_reference(q, k_cache, v_cache, cu, context, tables, window=window)
    assert (causal - want).abs().max() > 1e-2, "the images changed nothing: the case tests nothing"
    diff = (got - want).abs()
    assert diff.max() < 1e-5, f"{backend}, window {window}: max diff {diff.max():.2e}, mean {diff.mean():.2e}"
