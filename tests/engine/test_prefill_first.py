"""`EngineConfig.prefill_first`: a step with a prompt to compute runs prompts only, and decoding requests go on in the
next step; a step where no prompt fits decodes as usual, so nothing waits forever. In the deterministic mode the
replies are the ones of mixed steps, token for token."""

import pytest

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import random_prompt


def _engine(folder, prefill_first: bool, **overrides) -> Engine:
    settings = dict(block_size=4, num_kv_blocks=512, max_num_batched_tokens=256, dtype="float32", deterministic=True,
                    cpu_threads=2, speculative_tokens=0, prefill_first=prefill_first) | overrides
    return Engine.from_pretrained(str(folder), EngineConfig(**settings))


def _steps(engine: Engine) -> list[list[tuple[int, int]]]:
    """Records each step's chunks as (session id, tokens computed)."""
    steps: list[list[tuple[int, int]]] = []
    original = engine.runner.run

    def spy(chunks):
        steps.append([(chunk.request.seq.seq_id, chunk.length) for chunk in chunks])
        return original(chunks)

    engine.runner.run = spy
    return steps


def _submit(engine: Engine, prompt: list[int], new: int = 12):
    session = engine.open_session()
    session.append(prompt)
    return session, engine.submit(session, SamplingParams(max_new_tokens=new, ignore_eos=True))


@pytest.mark.parametrize("prefill_first", [True, False])
def test_a_step_with_a_prompt_runs_only_prompts(tiny_llama, prefill_first):
    engine = _engine(tiny_llama[0], prefill_first)
    steps = _steps(engine)
    first, replying = _submit(engine, random_prompt(20, seed=7100))
    while not replying.output_token_ids:
        engine.step()
    second, _ = _submit(engine, random_prompt(30, seed=7101))
    engine.step()
    expected = [(second.seq.seq_id, 30)] if prefill_first else [(first.seq.seq_id, 1), (second.seq.seq_id, 30)]
    assert steps[-1] == expected
    engine.step()  # no prompt left: both replies decode together
    assert sorted(steps[-1]) == [(first.seq.seq_id, 1), (second.seq.seq_id, 1)]
    engine.run_until_idle()


def test_replies_are_the_same_as_with_mixed_steps(tiny_llama):
    """Prompts arriving while others decode, in a pool small enough to preempt: every request finishes, with the
    replies of mixed steps."""
    prompts = [random_prompt(n, seed=7200 + i) for i, n in enumerate((14, 33, 9, 26, 41, 17))]
    replies, counts = {}, {}
    for prefill_first in (False, True):
        engine = _engine(tiny_llama[0], prefill_first, num_kv_blocks=40)
        steps = _steps(engine)
        requests = [_submit(engine, prompt, new=16)[1] for prompt in prompts[:3]]
        for _ in range(4):
            engine.step()
        requests += [_submit(engine, prompt, new=16)[1] for prompt in prompts[3:]]
        for _ in range(500):
            if not engine.has_pending():
                break
            engine.step()
        assert not engine.has_pending(), "requests still pending after 500 steps"
        assert all(len(r.output_token_ids) == 16 for r in requests)
        engine.block_manager.check_invariants()
        replies[prefill_first] = [list(r.output_token_ids) for r in requests]
        counts[prefill_first] = sum(1 for step in steps if len(step) > 1 and any(n > 1 for _, n in step)
                                    and any(n == 1 for _, n in step))
        if prefill_first:
            assert engine.scheduler.preemptions > 0, "the pool never ran short: the fallback was not exercised"
    assert replies[True] == replies[False]
    assert counts[False] > 0, "mixed steps never packed a prompt beside a decode: the comparison checked nothing"


def test_a_reply_never_sits_out_two_steps_in_a_row(tiny_llama):
    """A long prompt in 16-token chunks beside a decoding reply: prompts-only steps alternate with mixed ones."""
    engine = _engine(tiny_llama[0], True, max_num_batched_tokens=16)
    steps = _steps(engine)
    first, replying = _submit(engine, random_prompt(10, seed=7300), new=40)
    while not replying.output_token_ids:
        engine.step()
    second, long = _submit(engine, random_prompt(90, seed=7301), new=4)
    while not long.output_token_ids:
        engine.step()
    since = [step for step in steps if any(sid == second.seq.seq_id for sid, _ in step)]
    assert len(since) >= 6  # the prompt took several steps
    decoded = [any(sid == first.seq.seq_id for sid, _ in step) for step in since]
    assert decoded[0] is False  # the prompt's first chunk ran alone
    assert all(a or b for a, b in zip(decoded, decoded[1:])), decoded  # never two steps in a row without the reply
    assert decoded.count(False) >= 2  # and prompts went first more than once
    engine.run_until_idle()
