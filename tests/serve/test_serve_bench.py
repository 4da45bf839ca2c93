"""The server benchmark's figures from recorded episodes (no server: the arithmetic and the error rows)."""

import pytest

from benchmarks.serve_bench import summarize
from benchmarks.serve_client import EpisodeRecord, TurnRecord


def episode(qid: str, ttfts: list[float], prompt: int | None, cached: int | None, reason: str = "answered"):
    turns = [TurnRecord(ttft_s=t, latency_s=t + 1.0, prompt_tokens=prompt, cached_tokens=cached,
                        completion_tokens=5, raw="{}") for t in ttfts]
    return EpisodeRecord(qid=qid, answer=["x"], citations=[], search_history=[], turns=turns, reason=reason, wall_s=1.0)


def test_percentiles_rates_and_the_cached_fraction():
    episodes = [episode("a", [1.0, 4.0], 100, 80), episode("b", [2.0, 3.0], 100, 20),
                episode("c", [], None, None, reason="error: connection refused")]
    row = summarize("dossier serve", episodes, wall_s=36.0)
    assert row["episodes"] == 3 and row["episodes_failed"] == 1
    assert row["first_error"] == "error: connection refused"
    assert row["episodes_per_hour"] == pytest.approx(300.0)
    assert row["ttft_p50_s"] == pytest.approx(2.5)
    assert row["ttft_p90_s"] == pytest.approx(4.0)  # nearest rank: never below the median
    assert row["mean_request_s"] == pytest.approx(3.5)
    assert row["cached_token_fraction"] == pytest.approx(0.5)
    assert row["answered"] == 2


def test_a_server_without_usage_has_no_cached_fraction():
    row = summarize("transformers serve", [episode("a", [1.0, 2.0], None, None)], wall_s=10.0)
    assert row["cached_token_fraction"] is None and row["prompt_tokens"] is None
    assert row["ttft_p90_s"] == pytest.approx(2.0)
