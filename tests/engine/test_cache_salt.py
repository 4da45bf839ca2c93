"""A session's cache salt: blocks are shared within a salt (the default None included) and never across salts."""

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.core.sequence import Sequence
from tests.engine.conftest import random_prompt

PROMPT = random_prompt(40, seed=5)


@pytest.fixture
def engine(tiny_llama):
    return Engine.from_pretrained(str(tiny_llama[0]), EngineConfig(block_size=4, num_kv_blocks=256))


def turn(engine, salt=None) -> int:
    """Tokens of PROMPT served from the cache when a session of `salt` runs it."""
    session = engine.open_session(salt)
    session.append(PROMPT)
    request = session.generate(SamplingParams(max_new_tokens=1))
    session.close()
    return request.counters.tokens_cached


def probe(engine, salt) -> int:
    seq = Sequence(-1, engine.config.block_size, salt)
    seq.append(PROMPT, list(range(len(PROMPT))), len(PROMPT))
    return engine.block_manager.cached_prefix_tokens(seq)


def test_salts_share_within_and_never_across(engine):
    assert turn(engine, "alice") == 0
    assert probe(engine, "alice") == 40 and probe(engine, "bob") == 0 and probe(engine, None) == 0
    assert turn(engine, "bob") == 0  # the same tokens under another salt: computed again
    assert turn(engine) == 0
    assert turn(engine, "alice") == 36  # all but the last block (its last token is always computed)
    assert turn(engine) == 36  # the default salt shares with itself, as in-process agent runs rely on
    engine.block_manager.check_invariants()


def test_a_fork_keeps_its_parents_salt(engine):
    parent = engine.open_session("alice")
    parent.append(PROMPT)
    parent.generate(SamplingParams(max_new_tokens=1))
    child = parent.fork()
    assert child.seq.cache_salt == "alice"
    child.append([5, 6, 7])
    request = child.generate(SamplingParams(max_new_tokens=1))
    assert request.counters.tokens_cached == 40  # the parent's 41 tokens: 10 full blocks
    parent.close()
    child.close()
