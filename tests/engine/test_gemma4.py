"""Gemma 4 text (models/families/gemma4.py) against transformers' Gemma4ForCausalLM, beyond the generic family cases.

The tiny model (FamilySpec.tiny): two local layers (2 KV heads of 16, window 8) and two global layers (1 KV head of
32, keys that are its values, proportional RoPE on a quarter of the head) keep KV; a KV-sharing layer of each kind
reads the last of theirs with an MLP twice as wide; 8-channel per-layer inputs; soft-capped logits. Here its norm weights
and layer scalars are drawn away from 1, so a norm or scalar that is not applied changes the answer.
"""

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from engine.core.kv_budget import bytes_per_block, window_bytes_per_block
from models.registry import family_named
from tests.engine.conftest import (NO_BF16, bf16_session_check, build_model, hf_greedy, outputs_at_chunk_sizes,
                                   random_prompt)
from tests.vlm.reference import LogitSpy
from tools.errors import DossierError

BLOCK, WINDOW = 4, 8
MOST_HELD = WINDOW // BLOCK + 2  # the window's blocks, the block the next token starts, a partial one
TOLERANCE = 1e-4  # max |Δlogit| in float32, as tests/engine/test_families.py


def three_cached_turns(engine: Engine, hf, seed: int) -> None:
    """Three turns, each continued from the cache (only the new tokens prefilled): greedy tokens equal HF generate on
    the whole history, every sampled logits row within TOLERANCE of HF's full forward."""
    spy = LogitSpy(engine)
    session, rows = engine.open_session(), []
    for turn, length in enumerate((41, 23, 30)):
        session.append(random_prompt(length, seed=seed + turn))
        history = session.token_ids
        rows += [len(history) - 1 + j for j in range(8)]
        reply = session.generate(SamplingParams(max_new_tokens=8, ignore_eos=True))
        assert reply.output_token_ids == hf_greedy(hf, history, 8, None), f"turn {turn + 1} diverged from HF"
        if turn:
            assert reply.counters.tokens_cached == reply.history_tokens - 1, "the history was recomputed"
    with torch.inference_mode():
        full = hf(torch.tensor([session.token_ids])).logits[0, rows].float()
    delta = (torch.stack(spy.rows[session.seq.seq_id]) - full).abs().max()
    assert delta <= TOLERANCE, f"max |Δlogit| {delta:.3g}"


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory, tokenizer):
    model = build_model("gemma4", seed=3)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name.endswith("norm.weight"):
                tensor.copy_(1.0 + 0.3 * torch.randn(tensor.shape, generator=generator))
            elif name.endswith("layer_scalar"):
                tensor.copy_(0.5 + torch.rand(tensor.shape, generator=generator))
    scalars = [float(layer.layer_scalar) for layer in model.model.layers]
    assert all(abs(s - 1.0) > 1e-3 for s in scalars), scalars
    folder = tmp_path_factory.mktemp("tiny-gemma4")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def engine_for(folder, **config) -> Engine:
    config = {"block_size": BLOCK, "num_kv_blocks": 256, "attention_backend": "numba", **config}
    return Engine.from_pretrained(str(folder), EngineConfig(**config))


@pytest.mark.parametrize("backend", ["sdpa", "numba"])
def test_a_session_kept_between_turns_matches_hf(gemma4, backend):
    """Three turns, each continued from the cache (only the new tokens prefilled): greedy tokens equal HF generate
    on the whole history, every sampled logits row within 1e-4 of HF's full forward."""
    folder, hf = gemma4
    engine = engine_for(folder, attention_backend=backend, max_num_batched_tokens=16)
    three_cached_turns(engine, hf, seed=60)


def test_kv_sharing_layers_keep_no_kv_and_each_pool_has_its_kinds_heads(gemma4):
    """Layers 4 and 5 read layers 2 and 3's KV: only 0-3 have caches, the window pool (layers 0 and 2) with the
    local heads (2 x 16), the main pool (1 and 3) with the global ones (1 x 32); a 150-token session holds only its
    window in the local pool."""
    folder, hf = gemma4
    engine = engine_for(folder, max_num_batched_tokens=32)
    shape, runner = engine.adapter.shape, engine.runner
    assert shape.kv_layers == (0, 1, 2, 3) and shape.window_layers == (0, 2) and shape.full_layers == (1, 3)
    assert [layer.producer for layer in engine.adapter.layers] == [None] * 4 + [2, 3]
    assert tuple(runner.k_window.shape[::3]) == (2, 2) and runner.k_window.shape[-1] == 16
    assert runner.k_cache.shape[0] == 2 and tuple(runner.k_cache.shape[-2:]) == (1, 32)
    config = engine.config
    assert window_bytes_per_block(shape, config, torch.float32) == 2 * 2 * BLOCK * 2 * 16 * 4
    assert bytes_per_block(shape, config, torch.float32) == 2 * 2 * BLOCK * 1 * 32 * 4
    session = engine.open_session()
    for turn, length in enumerate((70, 40, 24)):
        session.append(random_prompt(length, seed=90 + turn))
        history = session.token_ids
        reply = session.generate(SamplingParams(max_new_tokens=6, ignore_eos=True))
        assert reply.output_token_ids == hf_greedy(hf, history, 6, None), f"turn {turn + 1} diverged from HF"
        held = engine.stats()["window_blocks"]["held_by_session"][session.session_id]
        assert held <= MOST_HELD, f"turn {turn + 1}: the local layer holds {held} blocks"
    assert len(session.seq.block_table) == -(-session.num_tokens // BLOCK) > 10 * held
    engine.block_manager.check_invariants()


def test_eight_sessions_share_one_system_prompt(gemma4):
    folder, hf = gemma4
    engine = engine_for(folder, max_num_batched_tokens=64)
    system = random_prompt(48, seed=7)
    histories = [system + random_prompt(5 + i, seed=70 + i) for i in range(8)]
    requests = []
    for history in histories:
        session = engine.open_session()
        session.append(history)
        requests.append(engine.submit(session, SamplingParams(max_new_tokens=6, ignore_eos=True)))
    engine.run_until_idle()
    for i, (request, history) in enumerate(zip(requests, histories)):
        assert request.output_token_ids == hf_greedy(hf, history, 6, None), f"session {i} diverged from HF"
    assert [r.counters.tokens_cached for r in requests] == [0] + [48] * 7
    assert engine.counters.tokens_prefilled == sum(map(len, histories)) - 7 * 48


def test_the_deterministic_mode_gives_hf_tokens_at_any_chunk_size(gemma4):
    folder, hf = gemma4
    prompt = random_prompt(60, seed=5)
    outputs = outputs_at_chunk_sizes(engine_for, folder, prompt)
    assert outputs[0] == outputs[1] == hf_greedy(hf, prompt, 8, None)


@NO_BF16
@pytest.mark.parametrize("backend", ["sdpa", "numba"])
def test_bf16_is_as_close_to_float32_as_hf_bf16(gemma4, backend):
    """Three bf16 turns continued from the cache (tests/engine/conftest.bf16_session_check)."""
    folder, hf = gemma4
    config = dict(dtype="bfloat16", attention_backend=backend, max_num_batched_tokens=16)
    bf16_session_check(engine_for(folder, **config), engine_for(folder, enable_prefix_caching=False, **config), hf)


def test_a_checkpoint_without_a_tensor_is_refused_by_name(gemma4, tmp_path):
    from safetensors.torch import load_file, save_file

    folder, _ = gemma4
    for path in folder.iterdir():
        if path.suffix != ".safetensors":
            (tmp_path / path.name).write_bytes(path.read_bytes())
    tensors = {}
    for path in folder.glob("*.safetensors"):
        tensors.update(load_file(path))
    del tensors["model.layers.1.layer_scalar"]
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(DossierError, match="no tensor 'layers.1.layer_scalar'"):
        engine_for(tmp_path)


@pytest.mark.parametrize("change, message", [
    (dict(num_kv_shared_layers=6), "shares KV in all 6 layers"),
    (dict(use_bidirectional_attention="all"), "encoder"),
])
def test_configs_it_cannot_run_are_refused_with_the_reason(change, message):
    family = family_named("gemma4")
    config = family.config(**{**family.tiny, "vocab_size": 448, **change})
    with pytest.raises(DossierError, match=message), torch.device("meta"):
        family.adapter(config, family, None)


def test_the_e2b_shape_keeps_kv_in_fifteen_layers_and_each_pool_has_its_heads():
    """At Gemma 4 E2B's shape (35 layers, the last 20 reading earlier layers' KV) only 15 layers keep KV: 12 local in
    the window pool (1 head of 256), 3 global in the main pool (1 head of 512); the default CPU budget's split."""
    from engine.core.kv_budget import split_for_window
    from models.registry import shape as registry_shape

    family, config = registry_shape("gemma4-e2b")
    with torch.device("meta"):
        shape = family.adapter(config, family, None).shape
    assert len(shape.kv_layers) == 15 and len(shape.window_layers) == 12 and len(shape.full_layers) == 3
    assert shape.window_kv_shape == (1, 256) and (shape.num_kv_heads, shape.head_dim) == (1, 512)
    engine_config = EngineConfig(block_size=16)
    assert bytes_per_block(shape, engine_config, torch.bfloat16) == 2 * 3 * 16 * 512 * 2
    assert window_bytes_per_block(shape, engine_config, torch.bfloat16) == 2 * 12 * 16 * 256 * 2
    uniform = 2**30 // (2 * 35 * 16 * 512 * 2)  # blocks per GiB of one 512-wide pool for all 35 layers
    full, _ = split_for_window(shape, engine_config, torch.bfloat16, 2 * 2**30)
    assert full > 6 * 2 * uniform  # 206,160 tokens of context against 29,959
    full, _ = split_for_window(shape, engine_config, torch.bfloat16, 40 * 2**30)
    assert full > 11 * 40 * uniform  # 6,847,136 against 599,186


def test_kv_sharing_layers_run_only_on_the_sampled_rows(gemma4):
    """Layers 4 and 5 keep no KV and feed only the logits, so a prefill runs them on the rows it samples (none in
    a chunk that does not end its prompt), as transformers does for the kept logits; tokens still equal HF's."""
    folder, hf = gemma4
    engine = engine_for(folder, max_num_batched_tokens=16)
    assert engine.adapter.shape.sampled_only_from == 4
    rows = {i: [] for i in range(6)}
    for i, layer in enumerate(engine.adapter.layers):
        layer.register_forward_hook(lambda module, args, out, i=i: rows[i].append(out.shape[0]))
    sessions = [engine.open_session() for _ in range(2)]
    prompts = [random_prompt(41, seed=11), random_prompt(9, seed=12)]
    requests = []
    for session, prompt in zip(sessions, prompts):
        session.append(prompt)
        requests.append(engine.submit(session, SamplingParams(max_new_tokens=3, ignore_eos=True)))
    engine.run_until_idle()
    for request, prompt in zip(requests, prompts):
        assert request.output_token_ids == hf_greedy(hf, prompt, 3, None)
    assert sum(rows[3]) == 41 + 9 + 2 * 2  # every prompt row, then one row a decode step
    assert sum(rows[4]) == sum(rows[5]) == 2 + 2 * 2  # one sampled row a prompt, one a decode step


@pytest.fixture(scope="module")
def gemma4_moe(tmp_path_factory, tokenizer):
    """The tiny model with a mixture of experts beside every dense MLP (26B-A4B's layer: 4 experts, 2 a token), its
    router scales and norms drawn away from 1."""
    from transformers import Gemma4ForCausalLM

    from tests.engine.conftest import TINY

    family = family_named("gemma4")
    config = family.config(**{**TINY, "vocab_size": 448, **family.tiny, "enable_moe_block": True, "num_experts": 4,
                              "top_k_experts": 2, "moe_intermediate_size": 24})
    torch.manual_seed(5)
    model = Gemma4ForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name.endswith(("norm.weight", "_1.weight", "_2.weight", "router.scale", "per_expert_scale")):
                tensor.copy_(1.0 + 0.3 * torch.randn(tensor.shape, generator=generator))
    folder = tmp_path_factory.mktemp("tiny-gemma4-moe")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


@pytest.mark.parametrize("backend", ["sdpa", "numba"])
def test_the_mixture_of_experts_model_matches_hf_over_cached_turns(gemma4_moe, backend):
    """Three turns continued from the cache: tokens equal HF generate, logits within 1e-4 of HF's full forward; the
    experts are really used (each of the 4 gets tokens)."""
    folder, hf = gemma4_moe
    engine = engine_for(folder, attention_backend=backend, max_num_batched_tokens=16)
    assert all(layer.experts is not None for layer in engine.adapter.layers)
    routed = set()
    engine.adapter.layers[0].router.register_forward_hook(lambda m, a, out: routed.update(out[1].flatten().tolist()))
    three_cached_turns(engine, hf, seed=160)
    assert routed == {0, 1, 2, 3}


def test_the_mixture_of_experts_model_is_batch_invariant(gemma4_moe):
    folder, hf = gemma4_moe
    prompt = random_prompt(60, seed=15)
    outputs = outputs_at_chunk_sizes(engine_for, folder, prompt)
    assert outputs[0] == outputs[1] == hf_greedy(hf, prompt, 8, None)
