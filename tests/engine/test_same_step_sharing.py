"""Sessions admitted together share a prefix that one of them is computing in the same step.

Counters show the shared system prompt computed once for 32 sessions submitted at once,
and the greedy tokens still equal HF `generate` (the later sessions read blocks that the
same forward pass wrote).
"""

import pytest

from engine import Engine, EngineConfig
from tests.engine.conftest import hf_greedy, random_prompt, submit_together

SESSIONS = 32
PREFIX = 64  # the "system prompt": 16 full blocks of 4 tokens


@pytest.mark.parametrize("budget", [4096, 100])
def test_shared_system_prompt_is_computed_once_for_32_sessions(tiny_llama, budget):
    folder, hf = tiny_llama
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=1024,
                                                               max_num_batched_tokens=budget, attention_backend="sdpa"))
    prefix = random_prompt(PREFIX, seed=7)
    suffixes = [random_prompt(3 + i % 5, seed=50 + i) for i in range(SESSIONS)]
    requests = submit_together(engine, [prefix + s for s in suffixes])
    counters = engine.counters
    # the prefix once, plus each session's own question
    assert counters.tokens_prefilled == PREFIX + sum(len(s) for s in suffixes), counters
    assert counters.tokens_cached == (SESSIONS - 1) * PREFIX, counters
    assert [r.counters.tokens_cached for r in requests] == [0] + [PREFIX] * (SESSIONS - 1)
    if budget == 4096:
        assert engine.phases["prefill_steps"] == 1, "all 32 sessions should have been admitted in one step"
    # every session holds the same 16 prefix blocks, by reference
    tables = {tuple(r.seq.block_table[: PREFIX // 4]) for r in requests}
    assert len(tables) == 1
    for i in (0, 1, SESSIONS - 1):  # sessions that read blocks written earlier in the same forward pass
        assert requests[i].output_token_ids == hf_greedy(hf, prefix + suffixes[i], 6, None), f"session {i} diverged"


def test_without_prefix_caching_every_session_computes_the_prompt(tiny_llama):
    folder, _ = tiny_llama
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=1024,
                                                               enable_prefix_caching=False))
    prefix = random_prompt(PREFIX, seed=7)
    suffixes = [random_prompt(4, seed=80 + i) for i in range(8)]
    submit_together(engine, [prefix + s for s in suffixes])
    assert engine.counters.tokens_prefilled == 8 * (PREFIX + 4)
    assert engine.counters.tokens_cached == 0
