"""The engine benchmark's systems agree: every peer's and ablation's greedy tokens equal the engine's."""

from benchmarks.engine_sessions import Workload, run_benchmark
from engine.core.config import EngineConfig


def test_every_peer_and_ablation_matches_and_history_comes_from_cache():
    workload = Workload(sessions=3, turns=3, tool_tokens=40, new_tokens=4)
    result = run_benchmark("llama-tiny", workload, EngineConfig(kv_cache_gib=0.05), naive_sessions=2, padded_batch=2)
    rows = {row["system"]: row for row in result["rows"]}
    assert set(rows) == {"dossier", "naive", "kv_cache", "padded", "one_seq", "no_prefix_cache"}
    for name, row in rows.items():  # the same tokens from every system on every session it ran
        assert row["sessions_matching_dossier"] == row["sessions_measured"], name
    assert rows["dossier"]["sessions_measured"] == rows["no_prefix_cache"]["sessions_measured"] == 3
    assert rows["naive"]["sessions_measured"] == rows["one_seq"]["sessions_measured"] == 2
    assert result["outputs_match"] and result["naive_sessions_measured"] == 2
    assert result["cache_reuse_fraction"] > 0.9  # all but each turn's last sampled token
    # the naive peer recomputes every history; keeping the cache computes each token once, as the engine does
    assert rows["naive"]["tokens_prefilled_measured"] > rows["kv_cache"]["tokens_prefilled_measured"] * 2
    # without prefix caching the shared 256-token prompt is computed by every session
    assert rows["no_prefix_cache"]["tokens_prefilled_measured"] >= rows["dossier"]["tokens_prefilled_measured"] + 2 * 252
    assert result["strongest_peer"] in ("naive", "kv_cache", "padded")
    assert result["speedup_vs_strongest_peer"] == min(result[f"speedup_vs_{p}"] for p in ("naive", "kv_cache", "padded"))
    assert result["counters"]["tokens_generated"] == 3 * 3 * 4
