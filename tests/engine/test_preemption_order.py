"""A request short of KV blocks may preempt only requests of lower priority (submitted after it), never earlier ones.

When prompts are long beside the pool (FinanceBench's 19K-token file-search prompts in a 37K-token pool), a later
request that took the blocks of an earlier one made the two evict each other chunk after chunk: every step recomputed
a prompt another step had thrown away, and the first request's decode moved one token per (prefill-sized) step.
"""

import pytest

from engine import Engine, EngineConfig
from tests.engine.conftest import hf_greedy, random_prompt, submit_together

PROMPT, NEW = 50, 8


@pytest.mark.parametrize("backend", ["sdpa", "numba"])
def test_long_prompts_beside_a_small_pool_are_prefilled_once_in_submission_order(tiny_llama, backend):
    folder, hf = tiny_llama
    # 24 blocks x 4 tokens = 96 tokens: one prompt of 50 (+ 8 generated) fits, and half of a second one
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=24,
                                                              max_num_batched_tokens=16, attention_backend=backend))
    prompts = [random_prompt(PROMPT, seed=900 + i) for i in range(5)]
    requests = submit_together(engine, prompts, NEW)
    for i, (prompt, request) in enumerate(zip(prompts, requests)):
        assert request.output_token_ids == hf_greedy(hf, prompt, NEW, None), f"request {i} diverged"
    assert requests[0].counters.preemptions == 0, "a later request took an earlier one's blocks"
    prefilled = engine.stats()["counters"]["tokens_prefilled"]  # 445 of 250 before the fix
    # each prompt once, plus at most what a waiting request computed into free blocks before it was preempted
    assert prefilled <= len(prompts) * PROMPT * 1.25, (prefilled, len(prompts) * PROMPT)
    engine.block_manager.check_invariants()
