"""`dossier serve` on the real default model (SmolLM2-135M-Instruct) with the official openai client.

Slow: loads SmolLM2 (the GGUF is converted once into $DOSSIER_CACHE) and generates for real.
Run with: .venv/bin/python -m pytest -q -m slow tests/serve/test_smollm2.py
"""

import json

import pytest

from benchmarks.serve_client import HarnessSettings, MadqaHarness, madqa_tools
from tests.serve.conftest import Live
from tests.serve.test_madqa_harness import sample  # noqa: F401  (the sample corpus)
from tools.schema import ToolSpec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol():
    from engine.core.config import EngineConfig
    from engine.core.llm_engine import Engine
    from engine.serve.app import build_app
    from engine.serve.backend import LocalBackend
    from engine.serve.config import ServeConfig
    from engine.serve.server import ServerThread

    engine = Engine.from_pretrained("default", EngineConfig(kv_cache_gib=1.0))
    backend = LocalBackend(engine)
    backend.start()
    with ServerThread(build_app(backend, ServeConfig(served_model_names=("default",)))) as url:
        yield Live(url, backend, "default", timeout=900)  # a shared 2-core machine can be slow
    backend.stop()


def ask(live, content: str, **kwargs):
    return live.client.chat.completions.create(model="default", messages=[{"role": "user", "content": content}],
                                               temperature=0, **kwargs)


def test_plain_chat_and_streaming(smol):
    reply = ask(smol, "What is the capital of France?", max_tokens=20)
    assert "Paris" in reply.choices[0].message.content
    chunks = ask(smol, "What is the capital of France?", max_tokens=20, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply.choices[0].message.content


def test_forced_tool_calls_always_parse_and_validate(smol):
    tools = madqa_tools(max_chars=40, max_items=3)
    specs = {t["function"]["name"]: ToolSpec(t["function"]["name"], t["function"]["description"],
                                             t["function"]["parameters"]) for t in tools}
    questions = ["What was the revenue in 2023?", "Who signed the membership form?", "How much is a cold brew?",
                 "When is the library closed?", "What did the memo decide?", "What was net income in 2022?"]
    calls = 0
    for i, question in enumerate(questions * 2):
        choice = "required" if i % 2 else {"type": "function", "function": {"name": "provide_answer"}}
        reply = ask(smol, question, max_tokens=160, tools=tools, tool_choice=choice, parallel_tool_calls=False)
        for call in reply.choices[0].message.tool_calls or []:
            specs[call.function.name].validate(json.loads(call.function.arguments))
            calls += 1
        assert reply.choices[0].finish_reason in ("tool_calls", "length")
    assert calls >= 10  # a forced call finishes within 160 tokens nearly always


def test_json_schema_and_the_cache_on_the_second_turn(smol):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"]}
    reply = ask(smol, "Name the capital of France as JSON.", max_tokens=30,
                response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}})
    assert json.loads(reply.choices[0].message.content)["city"]
    history = [{"role": "user", "content": "Name the capital of France as JSON."},
               reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "And of Italy?"}]
    second = smol.client.chat.completions.create(model="default", messages=history, max_tokens=10, temperature=0)
    # every full 16-token block of the first turn, its reply included, but for the last sampled token (never fed
    # through the model, so its block is computed now)
    first_turn = reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= (first_turn - 1) // 16 * 16


def test_madqa_harness_over_the_sample_corpus(smol, sample):  # noqa: F811
    env, questions = sample
    # 320 tokens hold the longest call the bounded schema admits (~260 characters), so no call is cut off
    harness = MadqaHarness(smol.client, "default", env, HarnessSettings(max_iterations=4, max_tokens=320,
                                                                        tools=madqa_tools(max_chars=40, max_items=2)))
    episodes = [harness.run(q) for q in questions[:4]]
    assert all(e.reason == "answered" for e in episodes), [e.reason for e in episodes]
    pairs = [(before, turn) for e in episodes for before, turn in zip(e.turns, e.turns[1:])]
    # each re-sent history comes back from the cache, the server's own reply included: all of the previous request
    # but its last sampled token and the partial 16-token block at the end (the new tool output is not cached)
    assert pairs and all(turn.cached_tokens >= before.prompt_tokens + before.completion_tokens - 1 - 15
                         for before, turn in pairs), [(b.prompt_tokens, b.completion_tokens, t.cached_tokens)
                                                      for b, t in pairs]
