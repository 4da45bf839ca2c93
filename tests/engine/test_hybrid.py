"""Qwen3.5's hybrid layers in the engine (issue 49): per-sequence states, KV only where attention needs it,
prefix sharing through state checkpoints.

Parity with transformers (prefill, batched decode with chunked prefill, a 4-turn session continued from
its state, preemption) runs for this family in tests/engine/test_families.py like every text family; here
what is particular to a model whose linear layers keep a state instead of KV.
"""

import logging

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import NO_BF16, bf16_session_check, build_model, hf_greedy, random_prompt
from tools.errors import DossierError


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("tiny-qwen3_5")
    model = build_model("qwen3_5")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def _engine(folder, **config) -> Engine:
    return Engine.from_pretrained(str(folder), EngineConfig(**{"block_size": 4, "num_kv_blocks": 128} | config))


def test_only_full_attention_layers_hold_kv_and_closing_a_session_frees_its_state(hybrid):
    folder, _ = hybrid
    engine = _engine(folder)
    assert engine.adapter.shape.kv_layers == (3,)  # linear, linear, linear, full
    assert engine.runner.k_cache.shape[0] == 1 and engine.runner.k_layers[0] is None
    session = engine.open_session()
    session.append(random_prompt(30, seed=1))
    session.generate(SamplingParams(max_new_tokens=4, ignore_eos=True))
    assert len(engine.runner.recurrent) == 1 and engine.runner.recurrent.nbytes() > 0
    session.close()
    assert len(engine.runner.recurrent) == 0


def test_eight_sessions_share_one_system_prompt_up_to_its_last_checkpoint(hybrid):
    """N episodes with one system prompt: the first computes it, the others resume from its state checkpoint."""
    folder, model = hybrid
    engine = _engine(folder)  # block_size 4: a checkpoint every 16 tokens
    system = random_prompt(70, seed=5)
    prompts = [system + random_prompt(10, seed=10 + i) for i in range(8)]
    requests = []
    for prompt in prompts:  # all submitted before the first step, as an agent run starts its episodes
        session = engine.open_session()
        session.append(prompt)
        requests.append(engine.submit(session, SamplingParams(max_new_tokens=4, ignore_eos=True)))
    engine.run_until_idle()
    cached = [r.counters.tokens_cached for r in requests]
    assert cached == [0] + [64] * 7  # the prefix's last checkpoint before 70 tokens is at 64
    stats = engine.stats()["linear_states"]
    assert stats["resumed_from_checkpoint"] == 7 and stats["sequences"] == 8 and stats["checkpoints"] >= 4
    for prompt, request in zip(prompts, requests):
        assert request.output_token_ids == hf_greedy(model, prompt, 4, None)


def test_a_fork_resumes_from_a_checkpoint_to_the_same_tokens(hybrid):
    folder, model = hybrid
    engine = _engine(folder)
    prompt = random_prompt(40, seed=2)
    parent = engine.open_session()
    parent.append(prompt)
    first = parent.generate(SamplingParams(max_new_tokens=5, ignore_eos=True)).output_token_ids
    child = parent.fork()
    more = random_prompt(7, seed=3)
    for session in (parent, child):
        session.append(more)
    history = parent.token_ids
    replies = [s.generate(SamplingParams(max_new_tokens=5, ignore_eos=True)) for s in (parent, child)]
    assert first == hf_greedy(model, prompt, 5, None)
    assert replies[0].output_token_ids == replies[1].output_token_ids == hf_greedy(model, history, 5, None)
    # the parent's turn 2 (run first) checkpointed at 48 tokens: the child read its blocks up to there, computed 4
    assert replies[1].counters.tokens_cached == 48 and replies[1].counters.tokens_prefilled == 4


def test_the_batch_invariant_mode_says_it_does_not_cover_linear_layers(hybrid, caplog):
    folder, _ = hybrid
    with caplog.at_level(logging.WARNING, logger="engine.core.model_runner"):
        engine = _engine(folder, deterministic=True)
    assert not engine.runner.deterministic and "linear-attention layers" in caplog.text


def test_states_share_the_kv_budget_and_idle_sessions_give_theirs_up(hybrid):
    """A quarter of the budget is state slots (here 2); a third session preempts the least recently used idle one."""
    folder, model = hybrid
    probe = _engine(folder)
    state = probe.adapter.shape.state_bytes
    assert state == 3 * (4 * (128 * 3 + 4 * 16 * 16))  # 3 linear layers: conv window (128 channels x 3) + 4 heads
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, kv_cache_gib=(8 * state + 64) / 2**30))
    assert engine.runner.recurrent.slots == 2
    sessions = [engine.open_session() for _ in range(4)]
    for i, session in enumerate(sessions):  # one turn each; all stay open (idle) afterwards
        session.append(random_prompt(20, seed=40 + i))
        session.generate(SamplingParams(max_new_tokens=3, ignore_eos=True))
        assert engine.stats()["linear_states"]["sequences"] <= 2
    for i, session in enumerate(sessions):  # a second turn: the evicted ones recompute their history
        session.append(random_prompt(5, seed=50 + i))
        history = session.token_ids
        reply = session.generate(SamplingParams(max_new_tokens=3, ignore_eos=True))
        assert reply.output_token_ids == hf_greedy(model, history, 3, None), f"session {i}"
    assert engine.stats()["preemptions"] >= 2 and engine.stats()["linear_states"]["sequences"] <= 2


def test_a_budget_without_room_for_one_state_is_refused_with_the_numbers(hybrid):
    folder, _ = hybrid
    with pytest.raises(DossierError, match=r"linear-attention state takes .* MiB .* raise --kv-cache-gib"):
        Engine.from_pretrained(str(folder), EngineConfig(block_size=4, kv_cache_gib=2e-6))


def test_checkpoints_stay_within_their_bytes_least_recently_used_first():
    import torch

    from engine.core.recurrent_state import RecurrentStates, Segment

    store = RecurrentStates(linear_layers=1, max_checkpoint_bytes=3 * 2 * 64)  # three checkpoints of 2 x 64 bytes
    step = store.step([Segment(0, 4, 1, 0)])
    for key in range(5):
        step.checkpoint(0, key, torch.zeros(16), torch.zeros(16))
        assert store.resumable(0) or key >= 3  # reading key 0 keeps it the most recently used
        store.trim()
    assert store.checkpoint_bytes <= 3 * 128 and set(store.checkpoints) == {0, 3, 4}


@pytest.mark.parametrize("family, config_kwargs", [
    ("qwen3_5-vl", {}),  # transformers' default Qwen3_5Config: a 9B-sized model (hidden 4096, 32 layers)
    ("glm46v", {"text_config": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                    "partial_rotary_factor": 0.5}}}),  # as GLM-4.1V/4.6V publish
])
def test_every_tensor_of_a_full_size_model_maps_onto_ours(family, config_kwargs):
    """transformers' own tensor names and shapes at a full-size config, on the meta device: each LM tensor is read
    into one of ours with matching shapes, none is left unused, and the tower's are all there. (Not the published
    checkpoints' index files, which are on the Hub: a published extra such as Qwen3.5's `mtp.*` is not covered.)"""
    import transformers

    from models.registry import family_named
    from models.weights import _sources, split_checkpoint

    spec = family_named(family)
    config = getattr(transformers, spec.config_class)(**config_kwargs)
    with torch.device("meta"):
        reference = spec.reference()(config)
        ours = spec.adapter(config, spec, None, None, name=family)
    visual, text, head = split_checkpoint(spec.weights, reference.state_dict())
    params = dict(ours.named_parameters())
    used = set()
    for target, names in _sources(ours):
        assert all(n in text for n in names), (target, names)
        assert sum(text[n].shape[0] for n in names) == params[target].shape[0], target
        assert all(text[n].shape[1:] == params[target].shape[1:] for n in names), target
        used.update(names)
    assert used == set(text), sorted(set(text) - used)[:5]
    assert set(ours.visual.state_dict()) <= set(visual)
    assert head is not None and head.shape == (config.text_config.vocab_size, config.text_config.hidden_size)


@NO_BF16
@pytest.mark.parametrize("backend", ["sdpa", "numba"])
def test_a_bf16_session_kept_between_turns_equals_a_recompute_and_is_as_close_to_float32_as_hf_bf16(hybrid, backend):
    """Issue 49's bf16 parity for the hybrid family (tests/engine/conftest.bf16_session_check): each of 3 turns
    continues from the kept state and KV, its greedy tokens equal a fresh engine prefilling the whole history, and
    every sampled logits row is as close to transformers' float32 model as transformers' own bf16 model is."""
    folder, hf = hybrid
    config = dict(dtype="bfloat16", attention_backend=backend, max_num_batched_tokens=16, num_kv_blocks=256)
    bf16_session_check(_engine(folder, **config), _engine(folder, enable_prefix_caching=False, **config), hf)


def test_a_text_only_checkpoint_under_the_published_prefix_loads_and_skips_what_it_does_not_use(hybrid, tmp_path):
    """A text-only Qwen3.5 fine-tune is stored as the published checkpoints are, its LM under
    model.language_model (transformers converts qwen3_5_text's names so; a public 2B fine-tune's index reads
    "model.language_model.layers.0.linear_attn.A_log", ...), and one cut from a published checkpoint may still
    hold its multi-token-prediction head and tower: it loads, and answers as the same weights under model.*."""
    from safetensors.torch import load_file, save_file

    folder, _ = hybrid
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    tensors = load_file(folder / "model.safetensors")
    renamed = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v for k, v in tensors.items()}
    renamed |= {"mtp.fc.weight": torch.zeros(4, 4), "model.visual.patch_embed.proj.weight": torch.zeros(2, 2)}
    save_file(renamed, tmp_path / "model.safetensors", metadata={"format": "pt"})
    prompt = random_prompt(20, seed=1)
    outputs = []
    for source in (folder, tmp_path):
        session = _engine(source).open_session()
        session.append(prompt)
        outputs.append(session.generate(SamplingParams(max_new_tokens=6, ignore_eos=True)).output_token_ids)
    assert outputs[0] == outputs[1]
