"""Sliding-window layers keep only their window's KV (engine/core/window_blocks.py), tokens still equal to HF.

A tiny Gemma-3 (a local layer with an 8-token window and a global layer, from FamilySpec.tiny) at block size 4:
a session of 170 tokens over three turns holds at most window / block + 2 blocks in the local layer's pool
while its global layer keeps them all; shared system prompts are still computed once; a small window pool
preempts and recomputes exactly; the deterministic mode and the budget split see the two pools.
"""

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from engine.core.kv_budget import split_for_window, window_blocks_needed
from models.registry import shape as registry_shape
from tests.engine.conftest import build_model, hf_greedy, outputs_at_chunk_sizes, random_prompt
from tools.errors import DossierError

WINDOW, BLOCK = 8, 4  # gemma3's tiny sliding_window; the block size of these tests
MOST_HELD = WINDOW // BLOCK + 2  # a window's blocks, the one the next token starts, a partial one


@pytest.fixture(scope="module")
def gemma(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("tiny-gemma3-window")
    model = build_model("gemma3")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def engine_for(folder, **config) -> Engine:
    config.setdefault("block_size", BLOCK)
    config.setdefault("num_kv_blocks", 256)
    config.setdefault("attention_backend", "numba")
    return Engine.from_pretrained(str(folder), EngineConfig(**config))


def window_stats(engine: Engine) -> dict:
    return engine.stats()["window_blocks"]


@pytest.mark.parametrize("backend", ["sdpa", "numba"])
def test_a_long_session_holds_only_its_window(gemma, backend):
    folder, hf = gemma
    engine = engine_for(folder, attention_backend=backend, max_num_batched_tokens=32)
    assert engine.adapter.shape.window_layers == (0,) and engine.adapter.shape.full_layers == (1,)
    assert engine.runner.k_window.shape[0] == 1 and engine.runner.k_cache.shape[0] == 1
    session = engine.open_session()
    for turn, length in enumerate((70, 40, 36)):
        session.append(random_prompt(length, seed=40 + turn))
        history = session.token_ids
        reply = session.generate(SamplingParams(max_new_tokens=8, ignore_eos=True))
        assert reply.output_token_ids == hf_greedy(hf, history, 8, None), f"turn {turn + 1} diverged from HF"
        if turn:
            assert reply.counters.tokens_cached == reply.history_tokens - 1, "the history was recomputed"
        held = window_stats(engine)["held_by_session"][session.session_id]
        main = len(session.seq.block_table)
        assert held <= MOST_HELD, f"turn {turn + 1}: the local layer holds {held} blocks, its window needs {MOST_HELD}"
        assert main == -(-session.num_tokens // BLOCK), "the global layer must keep every block"
    stats = window_stats(engine)
    assert stats["total"] - stats["free"] == held  # the pool's only user holds just its window
    assert session.num_tokens == 170 and main == 43 > 10 * held
    engine.block_manager.check_invariants()


def test_shared_system_prompt_is_computed_once_with_its_window(gemma):
    folder, hf = gemma
    engine = engine_for(folder, max_num_batched_tokens=64)
    system = random_prompt(48, seed=7)
    sessions, histories = [], []
    for i in range(8):
        session = engine.open_session()
        session.append(system + random_prompt(5 + i, seed=70 + i))
        sessions.append(session)
        histories.append(session.token_ids)
    requests = [engine.submit(s, SamplingParams(max_new_tokens=6, ignore_eos=True)) for s in sessions]
    engine.run_until_idle()
    for i, (request, history) in enumerate(zip(requests, histories)):
        assert request.output_token_ids == hf_greedy(hf, history, 6, None), f"session {i} diverged from HF"
    cached = [r.counters.tokens_cached for r in requests]
    assert cached[0] == 0 and all(c == 48 for c in cached[1:]), cached  # 12 shared blocks, computed once
    assert engine.counters.tokens_prefilled == sum(len(h) for h in histories) - 7 * 48
    engine.block_manager.check_invariants()


def test_a_match_stops_where_the_window_pool_lost_the_window(gemma):
    """A prefix whose global blocks are cached but whose last window was evicted from the window pool is recomputed
    from the last block the local layer still has: tokens equal to HF."""
    folder, hf = gemma
    engine = engine_for(folder, max_num_batched_tokens=64)
    system = random_prompt(48, seed=8)
    first = engine.open_session()
    first.append(system + random_prompt(6, seed=80))
    first.generate(SamplingParams(max_new_tokens=4, ignore_eos=True))
    first.close()
    window = engine.block_manager.window
    for block in list(window.free):  # evict the window pool's cached blocks: the global pool still has the prefix
        if window.block_hash[block] is not None:
            del window.hash_to_block[window.block_hash[block]]
            window.block_hash[block] = window.block_tokens[block] = None
    second = engine.open_session()
    history = system + random_prompt(6, seed=81)
    second.append(history)
    reply = second.generate(SamplingParams(max_new_tokens=6, ignore_eos=True))
    assert reply.output_token_ids == hf_greedy(hf, history, 6, None)
    assert reply.counters.tokens_cached == 0, "the local layer's window was gone: nothing could be taken"
    engine.block_manager.check_invariants()


def test_a_small_window_pool_preempts_and_recomputes_exactly(gemma):
    folder, hf = gemma
    engine = engine_for(folder, num_kv_blocks=64, max_num_seqs=2, max_num_batched_tokens=16)
    assert engine.runner.window_blocks == window_blocks_needed(engine.adapter.shape, engine.config) == 12
    sessions = [engine.open_session() for _ in range(5)]
    for turn in range(2):
        requests, histories = [], []
        for i, session in enumerate(sessions):
            session.append(random_prompt(9 + i, seed=900 + 10 * turn + i))
            histories.append(session.token_ids)
            requests.append(engine.submit(session, SamplingParams(max_new_tokens=6, ignore_eos=True)))
        engine.run_until_idle()
        for i, (request, history) in enumerate(zip(requests, histories)):
            assert request.output_token_ids == hf_greedy(hf, history, 6, None), f"session {i} turn {turn + 1}"
    assert engine.stats()["preemptions"] > 0, "five sessions' windows exceed the pool: idle ones are preempted"
    engine.block_manager.check_invariants()


def test_the_deterministic_mode_reads_the_window_pool(gemma):
    folder, hf = gemma
    prompt = random_prompt(60, seed=5)

    def holds_its_window(engine, session):
        assert window_stats(engine)["held_by_session"][session.session_id] <= MOST_HELD

    outputs = outputs_at_chunk_sizes(engine_for, folder, prompt, check=holds_its_window)
    assert outputs[0] == outputs[1] == hf_greedy(hf, prompt, 8, None)


def test_the_budget_gives_the_global_layers_what_the_windows_do_not_need():
    family, config = registry_shape("gemma3-1b")
    with torch.device("meta"):
        shape = family.adapter(config, family, None).shape
    assert len(shape.window_layers) == 22 and len(shape.full_layers) == 4
    config = EngineConfig(block_size=16)
    gib = 2**30
    full, window = split_for_window(shape, config, torch.bfloat16, 40 * gib)
    uniform = 40 * gib // (2 * 26 * 16 * 256 * 2)  # one pool for all 26 layers, as before
    assert window == window_blocks_needed(shape, config) == 128 * 34 + 128
    assert full > 5 * uniform  # the global layers' pool holds over five times the tokens
    full, window = split_for_window(shape, config, torch.bfloat16, 2 * gib)
    assert window <= 2 * gib // (2 * 26 * 16 * 256 * 2) <= full  # never smaller than one pool for all
    with pytest.raises(DossierError, match="too small for this model.*512-token window"):
        split_for_window(shape, config, torch.bfloat16, 2**20)
