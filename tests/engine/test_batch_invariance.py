"""Issue 48's acceptance test: in the deterministic mode a sequence's tokens and logits are the same bits however it ran.

The same 6 prompts (greedy, a tiny random Llama/Qwen2 built from a config) run
  (a) one at a time, (b) all together, (c) in shuffled arrival order with a KV pool so small that
  requests are preempted and recomputed, (d) with prefill chunks of 7 and of 64 tokens, (e) cut after
  a few steps and resumed in a fresh engine from each session's tokens (re-prefilled), (f) again in
  the engine of (b), their prefixes now read from the prefix cache;
and every run must give the tokens of (a) and, at every sampled position, logits equal to the bit.
Without the mode the same comparison fails on this CPU (the second test shows it does, so the first
is not a check that cannot fail). float32 always; bfloat16 only where the CPU has native bf16.
"""

import random

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import NO_BF16, random_prompt

PROMPT_LENS = (5, 23, 40, 17, 61, 31)
NEW = 6
BLOCK = 4


NO_INT8 = pytest.mark.skipif("fbgemm" not in torch.backends.quantized.supported_engines,
                             reason="the int8 CPU path needs FBGEMM (x86)")
CASES = [("tiny_llama", "float32"), ("tiny_qwen2", "float32"),
         pytest.param("tiny_llama", "bfloat16", marks=NO_BF16), pytest.param("tiny_qwen2", "bfloat16", marks=NO_BF16),
         pytest.param("tiny_llama", "float32+int8", marks=NO_INT8), ("tiny_llama", "float32+int4")]
PROMPTS = [random_prompt(n, seed=4800 + i) for i, n in enumerate(PROMPT_LENS)]


def _engine(folder, dtype: str, deterministic: bool, **overrides) -> Engine:
    quantization = None
    if "+" in dtype:  # "float32+int8": the model dtype and a quantisation
        dtype, quantization = dtype.split("+")
    settings = dict(block_size=BLOCK, num_kv_blocks=256, max_num_batched_tokens=128, dtype=dtype,
                    quantization=quantization, deterministic=deterministic, cpu_threads=2) | overrides
    engine = Engine.from_pretrained(str(folder), EngineConfig(**settings))
    engine.sampled = {}  # (prompt index, position) -> the logits row that sampled the token at that position
    engine.prompt_of = {}  # request -> prompt index
    engine.mismatches = []  # positions a recomputation (after preemption) sampled from other bits
    run = engine.runner.run

    def recording(chunks):
        logits = run(chunks)
        for chunk, row in zip([c for c in chunks if c.samples], logits):
            key = (engine.prompt_of[chunk.request], chunk.start + chunk.length)
            if key in engine.sampled and not torch.equal(engine.sampled[key], row):  # preempted, recomputed
                engine.mismatches.append(f"prompt {key[0]} position {key[1]}: recomputed logits differ")
            engine.sampled[key] = row.clone()
        return logits

    engine.runner.run = recording
    return engine


def _submit(engine: Engine, index: int, tokens: list[int], new: int = NEW):
    session = engine.open_session()
    session.append(tokens)
    request = engine.submit(session, SamplingParams(max_new_tokens=new, ignore_eos=True))
    engine.prompt_of[request] = index
    return request


def _result(engine: Engine, requests: dict[int, object]) -> tuple[dict, dict]:
    """({prompt index: generated tokens}, {(prompt index, position): logits row}, recomputation mismatches)."""
    return {i: list(r.output_token_ids) for i, r in requests.items()}, engine.sampled, engine.mismatches


def one_at_a_time(folder, dtype, deterministic):
    engine = _engine(folder, dtype, deterministic)
    requests = {}
    for i, prompt in enumerate(PROMPTS):
        requests[i] = _submit(engine, i, prompt)
        engine.run_until_idle()
    return _result(engine, requests)


def all_together(folder, dtype, deterministic, engine=None, **overrides):
    if engine is None:
        engine = _engine(folder, dtype, deterministic, **overrides)
    else:  # a second run in the same engine: record it apart
        engine.sampled, engine.mismatches = {}, []
    requests = {i: _submit(engine, i, prompt) for i, prompt in enumerate(PROMPTS)}
    engine.run_until_idle()
    return _result(engine, requests) + (engine, requests)


def shuffled_and_preempted(folder, dtype, deterministic):
    # 24 blocks of 4 tokens: the 6 prompts (177 tokens + 36 generated) cannot all be resident at once
    engine = _engine(folder, dtype, deterministic, num_kv_blocks=24, max_num_batched_tokens=32)
    order = list(range(len(PROMPTS)))
    random.Random(48).shuffle(order)
    requests = {i: _submit(engine, i, PROMPTS[i]) for i in order}
    engine.run_until_idle()
    preempted = sum(r.counters.preemptions for r in requests.values())
    assert preempted > 0, "the small pool was meant to force preemption and recomputation"
    return _result(engine, requests)


def interrupted_and_resumed(folder, dtype, deterministic):
    first = _engine(folder, dtype, deterministic, max_num_batched_tokens=48)
    requests = {i: _submit(first, i, prompt) for i, prompt in enumerate(PROMPTS)}
    for _ in range(5):  # some prompts still prefilling, some decoding
        first.step()
    done = {i: list(r.output_token_ids) for i, r in requests.items()}
    assert any(0 < len(t) < NEW for t in done.values()), "the cut was meant to fall inside the decodes"
    second = _engine(folder, dtype, deterministic)
    resumed = {i: _submit(second, i, PROMPTS[i] + done[i], NEW - len(done[i]))
               for i in range(len(PROMPTS)) if len(done[i]) < NEW}
    second.run_until_idle()
    tokens = {i: done[i] + (list(resumed[i].output_token_ids) if i in resumed else []) for i in done}
    return tokens, first.sampled | second.sampled, first.mismatches + second.mismatches


def _differences(reference: tuple, other: tuple) -> list[str]:
    ref_tokens, ref_logits = reference[:2]
    tokens, logits, mismatches = other[:3]
    problems = list(mismatches) + [f"prompt {i}: tokens {tokens[i]} != {ref_tokens[i]}" for i in ref_tokens if tokens[i] != ref_tokens[i]]
    for key, row in logits.items():
        if key in ref_logits and not torch.equal(row, ref_logits[key]):
            diff = (row - ref_logits[key]).abs().max().item()
            problems.append(f"prompt {key[0]} position {key[1]}: logits differ by up to {diff:.3g}")
    return problems


def _all_runs(folder, dtype: str, deterministic: bool) -> dict[str, list[str]]:
    reference = one_at_a_time(folder, dtype, deterministic)
    assert len(reference[1]) == len(PROMPTS) * NEW and not reference[2]
    together = all_together(folder, dtype, deterministic)
    engine = together[3]
    cached_before = engine.stats()["counters"]["tokens_cached"]
    again = all_together(folder, dtype, deterministic, engine=engine)
    assert engine.stats()["counters"]["tokens_cached"] > cached_before, "(f) was meant to read cached prefixes"
    runs = {"(b) all together": together[:3],
            "(c) shuffled, preempted": shuffled_and_preempted(folder, dtype, deterministic),
            "(d) chunks of 7": all_together(folder, dtype, deterministic, max_num_batched_tokens=7)[:3],
            "(d) chunks of 64": all_together(folder, dtype, deterministic, max_num_batched_tokens=64)[:3],
            "(e) interrupted, resumed": interrupted_and_resumed(folder, dtype, deterministic),
            "(f) prefixes from the cache": again[:3]}
    return {name: _differences(reference, run) for name, run in runs.items()}


@pytest.mark.parametrize(("family", "dtype"), CASES)
def test_deterministic_mode_gives_the_same_bits_however_a_sequence_ran(request, family, dtype):
    folder = request.getfixturevalue(family)[0]
    differences = _all_runs(folder, dtype, deterministic=True)
    failed = {name: problems[:3] for name, problems in differences.items() if problems}
    assert not failed, f"batch-variant in the deterministic mode: {failed}"


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=NO_BF16),
                                   pytest.param("float32+int8", marks=NO_INT8)])
def test_without_the_mode_the_same_runs_differ(tiny_llama, dtype):
    differences = _all_runs(tiny_llama[0], dtype, deterministic=False)
    if not any(differences.values()):
        pytest.skip("on this CPU the default path happened to give the same bits in every run, so it cannot show "
                    "that the deterministic test would catch a difference here")
    assert any(differences.values())


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=NO_BF16)])
def test_row_tiles_make_a_realistic_mlp_row_invariant(dtype):
    """SmolLM2-135M's MLP widths (the tiny models' matmuls are too small for the kernels to change blocking):
    a row's output in a call of M rows equals the row computed alone for every M with the mode's tiles (32 rows
    in bf16, 16 in float32, through packed weights); without them the
    probe's Xeon varied at M = 64 and 100 (float32) and 64 (bf16) for the 1536 -> 576 projection."""
    from models.batch_invariant import row_tile_for, set_batch_invariant
    from models.decoder import DecoderLayer, LayerSpec

    torch.manual_seed(0)
    spec = LayerSpec(hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64, eps=1e-5)
    layer = DecoderLayer(spec, 0).to(getattr(torch, dtype))
    x = torch.randn(100, 576, dtype=layer.mlp_norm.weight.dtype)
    torch.set_num_threads(2)

    def varying_rows(tile):
        set_batch_invariant(layer, tile)  # tiles of the mode's height, through weights packed for it
        alone = [layer._mlp_block(x[r:r + 1]) for r in range(0, 100, 7)]  # (1, hidden) each
        varying = set()
        for rows in (16, 17, 33, 64, 65, 100):
            out = layer._mlp_block(x[:rows])
            varying |= {rows for i, r in enumerate(range(0, rows, 7)) if not torch.equal(out[r], alone[i][0])}
        return sorted(varying)

    with torch.inference_mode():
        assert varying_rows(row_tile_for(layer.mlp_norm.weight.dtype)) == [], \
            "rows depend on how many share the call, even in tiles"
        plain = varying_rows(None)
    if not plain:
        pytest.skip("plain calls happened to be row-invariant at these widths on this CPU: nothing to contrast")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [None, 37])
def test_invariant_attention_kernel_gives_a_row_the_same_bits_in_any_tile(dtype, window):
    """kernels/invariant_attention_numba.py at Qwen2.5-1.5B's head shape: a row's output is the same bits
    whether it is attended alone (decode), in tiles of 7 or 32 rows of its chunk, or beside another
    sequence's rows; and it is attention (SDPA within float32 / bf16 rounding)."""
    import torch.nn.functional as F

    from kernels.invariant_attention_numba import query_tiles, rows_attention_torch

    torch.manual_seed(48)
    kv_heads, group, dim, block, length = 2, 6, 128, 16, 150
    k_cache = torch.randn(40, block, kv_heads, dim, dtype=dtype)
    v_cache = torch.randn(40, block, kv_heads, dim, dtype=dtype)
    tables = torch.stack([torch.randperm(40)[:10], torch.randperm(40)[:10]]).long()  # two sequences' blocks
    q = torch.randn(length, kv_heads, group, dim, dtype=dtype)
    lens = torch.arange(1, length + 1)
    one_seq = torch.zeros(length, dtype=torch.long)

    def attend(rows, seqs, row_lens, tile):
        return rows_attention_torch(rows, k_cache, v_cache, tables, seqs, row_lens,
                                    torch.from_numpy(query_tiles(seqs.numpy(), tile)), window)

    reference = attend(q, one_seq, lens, 32)
    for tile in (1, 7, length):
        assert torch.equal(attend(q, one_seq, lens, tile), reference), f"tiles of {tile} rows"
    for r in (0, 15, 16, 99, length - 1):  # alone, as a decode row
        assert torch.equal(attend(q[r:r + 1], one_seq[:1], lens[r:r + 1], 32)[0], reference[r]), f"row {r} alone"
    other = torch.randn(20, kv_heads, group, dim, dtype=dtype)  # another sequence's rows first in the step
    mixed = attend(torch.cat([other, q]), torch.cat([torch.ones(20, dtype=torch.long), one_seq]),
                   torch.cat([torch.arange(60, 80), lens]), 32)
    assert torch.equal(mixed[20:], reference), "beside another sequence"

    keys = k_cache[tables[0]].flatten(0, 1)[:length].float().repeat_interleave(group, 1).transpose(0, 1)
    values = v_cache[tables[0]].flatten(0, 1)[:length].float().repeat_interleave(group, 1).transpose(0, 1)
    position = torch.arange(length)
    visible = position[None, :] <= position[:, None]
    if window is not None:
        visible &= position[None, :] > position[:, None] - window
    expected = F.scaled_dot_product_attention(q.float().reshape(length, -1, dim).transpose(0, 1), keys, values,
                                              attn_mask=visible).transpose(0, 1)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert (reference.float().reshape(length, -1, dim) - expected).abs().max() < tolerance


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=NO_BF16)])
def test_packed_tile_linear_is_the_linear_and_follows_weight_updates(dtype):
    """The mode's packed weights give F.linear's product and are packed again when the weight changes in place
    (a merged adapter) or is replaced (weights loaded later): stale packs would answer with the old model."""
    from torch import nn

    from models.batch_invariant import PackedTileLinear

    torch.manual_seed(0)
    linear = nn.Linear(96, 40).to(getattr(torch, dtype))
    packed = PackedTileLinear(linear, 16)
    x = torch.randn(16, 96, dtype=linear.weight.dtype)
    tolerance = 1e-5 if dtype == "float32" else 3e-2
    with torch.no_grad():
        assert torch.allclose(packed(linear, x).float(), linear(x).float(), atol=tolerance)
        linear.weight.mul_(2)
        assert torch.allclose(packed(linear, x).float(), linear(x).float(), atol=tolerance), "in-place update"
        linear.weight = nn.Parameter(torch.randn_like(linear.weight))
        assert torch.allclose(packed(linear, x).float(), linear(x).float(), atol=tolerance * 4), "new weight"


@NO_INT8
def test_int8_with_a_pinned_range_gives_a_row_the_same_bits_at_any_height():
    """Int8DynamicLinear in the mode: the activation range pinned to [-1, 1] by two extra rows, so a row's codes
    and exact int32 sums are its own whatever the call's height or thread count (the decoder then calls it
    untiled); without the pin FBGEMM's one-range-per-call quantisation moves rows."""
    from torch import nn

    from models.int_linear import Int8DynamicLinear

    torch.manual_seed(0)
    linear = Int8DynamicLinear(nn.Linear(576, 1536))
    x = torch.randn(300, 576) * torch.rand(300, 1) * 3
    x[::5] = x[::5].abs()  # rows with no negative value: alone, their range is not [-1, 1]
    picks = range(0, 300, 23)

    def varying(pinned: bool) -> set[int]:
        linear.set_exact(pinned)
        alone = {r: linear(x[r:r + 1])[0] for r in picks}
        moved = set()
        for threads in (2, 1):
            torch.set_num_threads(threads)
            for rows in (2, 16, 65, 300):
                out = linear(x[:rows])
                moved |= {rows for r in picks if r < rows and not torch.equal(out[r], alone[r])}
        torch.set_num_threads(2)
        return moved

    try:
        assert varying(True) == set(), "pinned int8 rows depend on the call's height"
        assert varying(False), "the unpinned path was expected to move some row (else this test shows nothing)"
    finally:
        linear.set_exact(False)
