"""The engine benchmark's two sides agree: the engine's greedy tokens equal HF generate's on every history."""

from benchmarks.engine_sessions import Workload, run_benchmark


def test_text_benchmark_outputs_match_and_history_comes_from_cache():
    result = run_benchmark("llama-tiny", Workload(sessions=3, turns=3, tool_tokens=40, new_tokens=4), naive_sessions=2)
    assert result["outputs_match"] and result["sessions_matching"] == 2
    assert result["naive_sessions_measured"] == 2
    assert result["cache_reuse_fraction"] > 0.9  # all but each turn's last sampled token
    assert result["naive_tokens_prefilled"] > result["counters"]["tokens_prefilled"] * 2 / 3  # peer re-sends history
    assert result["counters"]["tokens_generated"] == 3 * 3 * 4
