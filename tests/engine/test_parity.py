"""The engine's greedy tokens equal Hugging Face `generate`'s (fp32, tiny random models).

Each case is a way the engine could silently diverge from a full recompute: batching
sequences of different lengths, chunked prefill, continuing a session from its cache,
sharing prefix blocks between sessions, and losing blocks to eviction and preemption.
"""

import pytest

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import hf_greedy, random_prompt

GREEDY = SamplingParams(max_new_tokens=12, ignore_eos=True)


@pytest.fixture(params=["sdpa", "numba"])
def make_engine(request):
    """Build an engine over a tiny model directory; every case runs on both CPU attention paths."""

    def build(folder, **config) -> Engine:
        config.setdefault("block_size", 4)
        config.setdefault("num_kv_blocks", 512)
        config.setdefault("attention_backend", request.param)
        return Engine.from_pretrained(str(folder), EngineConfig(**config))

    return build


def run_all(engine: Engine, prompts: list[list[int]], sampling=GREEDY) -> list[list[int]]:
    requests = []
    for prompt in prompts:
        session = engine.open_session()
        session.append(prompt)
        requests.append(engine.submit(session, sampling))
    engine.run_until_idle()
    return [r.output_token_ids for r in requests]


def test_one_prompt_matches_hf(tiny_llama, make_engine):
    folder, hf = tiny_llama
    prompt = random_prompt(23, seed=1)
    engine = make_engine(folder)
    assert run_all(engine, [prompt]) == [hf_greedy(hf, prompt, 12, None)]


def test_stops_at_eos_like_hf(tiny_llama, make_engine):
    folder, hf = tiny_llama
    engine = make_engine(folder)
    eos = sorted(engine.stop_token_ids)
    prompts = [random_prompt(n, seed=n) for n in range(5, 45, 3)]
    sampling = SamplingParams(max_new_tokens=40)
    outputs = run_all(engine, prompts, sampling)
    assert outputs == [hf_greedy(hf, p, 40, eos) for p in prompts]


@pytest.mark.parametrize("token_budget", [2048, 24])
def test_sixteen_prompts_batched_match_hf(tiny_llama, make_engine, token_budget):
    folder, hf = tiny_llama
    prompts = [random_prompt(3 + 4 * i, seed=100 + i) for i in range(16)]
    engine = make_engine(folder, max_num_batched_tokens=token_budget)
    outputs = run_all(engine, prompts)
    expected = [hf_greedy(hf, p, 12, None) for p in prompts]
    for i, (got, want) in enumerate(zip(outputs, expected)):
        assert got == want, f"prompt {i} (length {len(prompts[i])}) diverged with budget {token_budget}"
    assert engine.counters.forward_steps < 16 * 13, "sequences were not batched together"


def test_qwen2_batched_matches_hf(tiny_qwen2, make_engine):
    folder, hf = tiny_qwen2
    prompts = [random_prompt(5 + 7 * i, seed=200 + i) for i in range(6)]
    assert run_all(make_engine(folder), prompts) == [hf_greedy(hf, p, 12, None) for p in prompts]


def test_six_turn_session_continues_from_cache(tiny_llama, make_engine):
    folder, hf = tiny_llama
    engine = make_engine(folder)
    session = engine.open_session()
    for turn in range(6):
        session.append(random_prompt(9 + 5 * turn, seed=300 + turn))
        history = session.token_ids
        reply = session.generate(SamplingParams(max_new_tokens=10, ignore_eos=True))
        assert reply.output_token_ids == hf_greedy(hf, history, 10, None), f"turn {turn + 1} diverged"
        if turn:
            # everything but the previous turn's last sampled token (never fed back) came from the cache
            assert reply.counters.tokens_cached == reply.history_tokens - 1
            assert reply.counters.tokens_prefilled == len(history) - reply.counters.tokens_cached
    assert session.counters.history_tokens_cached == session.counters.history_tokens - 5


def test_sessions_share_a_prefix(tiny_llama, make_engine):
    folder, hf = tiny_llama
    engine = make_engine(folder)
    prefix = random_prompt(42, seed=400)
    prompts = [prefix + random_prompt(5 + i, seed=410 + i) for i in range(4)]
    first = run_all(engine, prompts[:1])
    rest_requests = []
    for prompt in prompts[1:]:
        session = engine.open_session()
        session.append(prompt)
        rest_requests.append(engine.submit(session, GREEDY))
    engine.run_until_idle()
    expected = [hf_greedy(hf, p, 12, None) for p in prompts]
    assert first + [r.output_token_ids for r in rest_requests] == expected
    for request in rest_requests:
        assert request.counters.tokens_cached == 40  # ten full 4-token blocks of the 42-token prefix
    # the shared blocks are held once, by reference count
    tables = [r.seq.block_table[:10] for r in rest_requests]
    assert all(t == tables[0] for t in tables)


def test_prefix_reuse_respects_extra_key(tiny_llama, make_engine):
    """Equal token ids with different image hashes must not share KV blocks."""
    from models.base import MultimodalItem, Segment

    folder, _ = tiny_llama
    engine = make_engine(folder)
    a, b = engine.open_session(), engine.open_session()
    tokens = random_prompt(20, seed=450)
    a.seq.append(tokens, list(range(20)), 20, [MultimodalItem(0, 8, "image-A")])
    b.seq.append(tokens, list(range(20)), 20, [MultimodalItem(0, 8, "image-B")])
    for s in (a, b):
        engine.scheduler.sequences[s.session_id] = s.seq
    engine.block_manager.allocate(a.seq, 20)
    a.seq.num_computed_tokens = 20
    engine.block_manager.register_computed(a.seq)
    assert engine.block_manager.match_prefix(b.seq) == 0
    c = engine.open_session()
    c.seq.append(tokens, list(range(20)), 20, [MultimodalItem(0, 8, "image-A")])
    assert engine.block_manager.match_prefix(c.seq) == 16
    del Segment


def test_eviction_and_preemption_keep_outputs_exact(tiny_llama, make_engine):
    folder, hf = tiny_llama
    # 30 blocks x 4 tokens = 120 tokens of KV for 6 sessions that grow to ~70 tokens each
    engine = make_engine(folder, num_kv_blocks=30, max_num_batched_tokens=32)
    sessions = [engine.open_session() for _ in range(6)]
    histories = {}
    for turn in range(3):
        requests = []
        for i, session in enumerate(sessions):
            session.append(random_prompt(8 + i, seed=500 + 10 * turn + i))
            histories[session.session_id] = session.token_ids
            requests.append(engine.submit(session, SamplingParams(max_new_tokens=9, ignore_eos=True)))
        engine.run_until_idle()
        for session, request in zip(sessions, requests):
            want = hf_greedy(hf, histories[session.session_id], 9, None)
            assert request.output_token_ids == want, f"session {session.session_id} turn {turn + 1} diverged"
    stats = engine.stats()
    assert stats["preemptions"] > 0 and stats["kv_blocks_evicted"] > 0, stats
    engine.block_manager.check_invariants()
