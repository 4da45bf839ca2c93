"""The run's progress line says when the KV pool is too small for the episodes in flight.

An idle episode (waiting for its tool) keeps its KV blocks until another one needs them; when the
pool is short its next turn prefills the whole conversation again. The backend reports each turn's
history tokens and how many came from the cache, and the progress line turns that into a hint."""

from types import SimpleNamespace

from engine import Engine, EngineConfig
from engine.agents.backend import EngineBackend
from engine.agents.launch import kv_reuse
from engine.agents.runner import RunSummary

TURN = SimpleNamespace(schema=None, allow_search=True, max_new_tokens=2)


def _turn(backend, session, text: str) -> dict:
    backend.append(session, [("user", text)])
    backend.submit(session, TURN, seed=0)
    outputs = []
    while backend.has_pending():
        outputs += backend.step()
    (_, output), = outputs
    return output.tokens


def _words(n: int, seed: int) -> str:
    return " ".join(f"w{(seed * 7919 + i * 104729) % 997}" for i in range(n))


def _history_after_a_long_neighbour(folder, num_kv_blocks: int) -> dict:
    """Session A's second turn after session B (about 1,150 tokens, 72 blocks of 16) ran in between."""
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=16, num_kv_blocks=num_kv_blocks,
                                                              max_num_batched_tokens=4096))
    backend = EngineBackend(engine, max_new_tokens=2, structured=False)
    a, b = backend.open("a"), backend.open("b")
    _turn(backend, a, _words(60, 1))
    _turn(backend, b, _words(60 * 4, 2))
    return _turn(backend, a, _words(10, 3))


def test_a_roomy_pool_serves_the_history_from_the_cache(tiny_llama):
    tokens = _history_after_a_long_neighbour(tiny_llama[0], num_kv_blocks=4096)
    # all but the last sampled token, whose KV is computed with the next turn
    assert tokens["history"] > 300 and tokens["history"] - tokens["history_cached"] == 1
    summary = RunSummary(history_tokens=tokens["history"], history_cached=tokens["history_cached"])
    assert kv_reuse(summary).startswith(", KV reuse 99.") and "raise" not in kv_reuse(summary)


def test_a_short_pool_recomputes_the_history_and_the_line_says_what_to_do(tiny_llama):
    tokens = _history_after_a_long_neighbour(tiny_llama[0], num_kv_blocks=80)
    assert tokens["history"] > 0 and tokens["history_cached"] < 0.5 * tokens["history"]
    summary = RunSummary(history_tokens=tokens["history"], history_cached=tokens["history_cached"])
    assert "raise --kv-cache-gib or lower --concurrency" in kv_reuse(summary)


def test_no_history_no_field():
    assert kv_reuse(RunSummary()) == ""
