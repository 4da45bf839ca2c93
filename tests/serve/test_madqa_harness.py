"""A MADQA-style harness (benchmarks/serve_client.py) completes episodes against `dossier serve`.

The client is written like MADQA's published vLLM agent: OpenAI tools `search_documents` and
`provide_answer`, the full history re-sent every turn, the answer forced on the last
iteration, page images as base64 data URLs. It runs over the sample corpus (`dossier
sample`), on the tiny random models (their answers are gibberish; the protocol is checked).
"""

import pytest

from benchmarks.serve_client import HarnessSettings, MadqaHarness, madqa_tools
from engine.agents.env import AgentEnv
from engine.datasets.formats import load_questions


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    from engine.datasets.sample import write_sample_suite
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import build_index

    root = tmp_path_factory.mktemp("sample")
    info = write_sample_suite(root / "s")
    ingest([info["pdfs"]], root / "corpus", IngestConfig(workers=1))
    build_index(CorpusStore(root / "corpus"))
    questions, errors = load_questions(info["questions"])
    assert not errors
    return AgentEnv(root / "corpus"), questions


def test_tools_episodes_complete_and_reuse_the_cache(live, sample):
    env, questions = sample
    # short strings and lists: the random model writes them to their limits, and every token is a step
    settings = HarnessSettings(max_iterations=3, max_tokens=256, tools=madqa_tools(max_chars=12, max_items=2),
                               search_first=True)
    harness = MadqaHarness(live.client, live.model, env, settings)
    episodes = [harness.run(q) for q in questions[:2]]
    for episode in episodes:
        assert episode.reason == "answered", episode.reason
        assert episode.answer and all(isinstance(a, str) for a in episode.answer)
        assert 2 <= len(episode.turns) <= 3
        assert len(episode.search_history) == len(episode.turns) - 1  # one action per turn: searches, then the answer
        for before, turn in zip(episode.turns, episode.turns[1:]):
            # the history re-sent each turn comes back from the cache, the server's own reply included
            assert turn.cached_tokens >= before.prompt_tokens + before.completion_tokens - 1 - 3
            assert turn.ttft_s is not None and turn.ttft_s <= turn.latency_s
    assert live.stats()["server"]["reply_memory_hits"] > 0


def test_text_protocol_episodes_complete(live, sample):
    env, questions = sample
    harness = MadqaHarness(live.client, live.model, env, HarnessSettings(mode="text", max_iterations=2, max_tokens=48))
    episode = harness.run(questions[0])
    assert episode.reason in ("answered", "max_iterations") and len(episode.turns) == 2
    assert episode.turns[1].cached_tokens > 0


def test_page_images_as_data_urls_on_a_vision_model(vl_live, sample):
    env, questions = sample
    settings = HarnessSettings(max_iterations=2, max_tokens=256, images=True, image_dpi=20, image_max_pixels=20_000, k=2,
                               tools=madqa_tools(max_chars=12, max_items=2), search_first=True)
    episode = MadqaHarness(vl_live.client, vl_live.model, env, settings).run(questions[0])
    assert episode.reason == "answered", episode.reason
    assert len(episode.turns) == 2 and episode.search_history
    assert episode.turns[1].cached_tokens > 0
