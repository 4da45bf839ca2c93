"""`dossier serve --ray`: two engines on a local 2-CPU Ray cluster behind one endpoint; each conversation's second
turn goes to the worker that served its first (seen in the cached-token count the client gets back)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.core.config import EngineConfig
from tests.distributed.helpers import build_tiny_model

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'dossier[ray]' (pinned in dev)")
pytest.importorskip("fastapi", reason="dossier serve needs fastapi (pip install 'dossier[serve]')")
pytest.importorskip("openai", reason="the serve tests use the official openai client (pip install 'dossier[dev]')")

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "You are a document agent. Use the tools search, view_page and answer to answer the question."
OPENERS = {"a": "The quarterly report lists revenue, operating income and net profit for each segment. " * 3,
           "b": "Tables, figures and footnotes appear on pages 12 to 19 of the filing. What is the capital? " * 3}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from openai import OpenAI

    from engine.distributed.router import RayServeBackend
    from engine.serve.app import build_app
    from engine.serve.config import ServeConfig
    from engine.serve.server import ServerThread

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = build_tiny_model(tmp_path_factory.mktemp("ray-serve") / "model")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        backend = RayServeBackend.start("local", 2, 0.0, str(model),
                                        EngineConfig(kv_cache_gib=0.05, device="cpu", block_size=4, num_kv_blocks=512))
        try:
            with ServerThread(build_app(backend, ServeConfig(served_model_names=("tiny",)))) as url:
                yield OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120), backend
        finally:
            backend.stop()
    finally:
        ray.shutdown()


def _turn(client, messages, **extra):
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0,
                                           extra_body=extra or None)
    return reply.choices[0].message.content, reply.usage


def test_second_turns_go_to_the_worker_holding_the_first(served):
    client, backend = served
    history, first_workers, first_usage = {}, {}, {}
    for name, opener in OPENERS.items():
        history[name] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": opener}]
        text, first_usage[name] = _turn(client, history[name])
        first_workers[name] = backend.last_route["worker"]
        history[name].append({"role": "assistant", "content": text})
    assert sorted(first_workers.values()) == [0, 1]  # nothing cached yet: the least loaded, so one each
    for name in OPENERS:
        history[name].append({"role": "user", "content": "And in 2019?"})
        _, usage = _turn(client, history[name])
        route = backend.last_route
        assert route["worker"] == first_workers[name] and route["why"] == "prefix", route
        # the whole first turn (up to its last full KV block of 4 tokens) came from that worker's cache
        assert usage.prompt_tokens_details.cached_tokens >= first_usage[name].prompt_tokens - 4, (name, usage)
        other = str(1 - first_workers[name])
        assert route["cached"][other] < usage.prompt_tokens_details.cached_tokens  # the other worker lacks it
    stats = backend.stats()["server"]["router"]
    assert stats["by_prefix"] == 2 and stats["routed"] == [2, 2]


def test_a_session_id_sticks_to_its_worker(served):
    client, backend = served
    messages = [{"role": "user", "content": "Search results: page 3 of annual-report.pdf mentions total revenue."}]
    text, _ = _turn(client, messages, session_id="s1")
    worker = backend.last_route["worker"]
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Which page?"}]
    _, usage = _turn(client, messages, session_id="s1")
    assert backend.last_route == {"worker": worker, "why": "session", "cached": {}}
    assert usage.prompt_tokens_details.cached_tokens > 0
