"""The engine benchmark's systems agree (every peer's and ablation's greedy tokens equal the engine's); the cross-CPU probe's comparison."""

import pytest

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


def test_cross_cpu_probe_compare_counts_tokens_bits_and_the_top_logit_gap():
    from benchmarks.cross_cpu_probe import compare

    def probe(tokens, sha, top):
        return {"model": "m", "dtype": "float32", "quantization": None, "prompt_lengths": [3], "new_tokens": 2,
                "cpu": {"model": "x"}, "aten_capability": "AVX2", "env": {},
                "sequences": [{"tokens": tokens, "sha256": sha, "top": top}]}

    a = probe([5, 6], ["aa", "bb"], [[[5, 1.0], [7, 0.5]], [[6, 2.0], [1, 1.0]]])
    b = probe([5, 9], ["aa", "cc"], [[[5, 1.0], [7, 0.5]], [[9, 2.1], [6, 2.0]]])
    result = compare(a, b)
    assert result["tokens_identical"] == 0 and result["first_differing_step"] == [1]
    assert result["logits_rows"] == 2 and result["rows_bit_equal"] == 1
    assert abs(result["largest_top_logit_difference"]) < 1e-12  # token 6 is 2.0 in both; 9 and 1 are not shared
    with pytest.raises(SystemExit, match="differ in dtype"):
        compare(a, {**b, "dtype": "bfloat16"})
