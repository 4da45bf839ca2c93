"""Qwen3.5's hybrid layers in the engine (issue 49): per-sequence states, KV only where attention needs it.

Parity with transformers (prefill, batched decode with chunked prefill, a 4-turn session continued from
its state, preemption) runs for this family in tests/engine/test_families.py like every text family; here
what is particular to a model whose linear layers keep a state instead of KV.
"""

import logging

import pytest

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import build_model, hf_greedy, random_prompt


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


def test_prefix_caching_is_off_and_a_fork_recomputes_to_the_same_tokens(hybrid, caplog):
    folder, model = hybrid
    with caplog.at_level(logging.INFO, logger="engine.core.llm_engine"):
        engine = _engine(folder, enable_prefix_caching=True)
    assert "prefix caching is off" in caplog.text and not engine.block_manager.enable_prefix_caching
    prompt = random_prompt(26, seed=2)
    parent = engine.open_session()
    parent.append(prompt)
    first = parent.generate(SamplingParams(max_new_tokens=5, ignore_eos=True)).output_token_ids
    child = parent.fork()
    more = random_prompt(7, seed=3)
    for session in (parent, child):
        session.append(more)
    history = parent.token_ids
    replies = [s.generate(SamplingParams(max_new_tokens=5, ignore_eos=True)).output_token_ids for s in (parent, child)]
    assert first == hf_greedy(model, prompt, 5, None)
    assert replies[0] == replies[1] == hf_greedy(model, history, 5, None)


def test_the_batch_invariant_mode_says_it_does_not_cover_linear_layers(hybrid, caplog):
    folder, _ = hybrid
    with caplog.at_level(logging.WARNING, logger="engine.core.model_runner"):
        engine = _engine(folder, deterministic=True)
    assert not engine.runner.deterministic and "linear-attention layers" in caplog.text
