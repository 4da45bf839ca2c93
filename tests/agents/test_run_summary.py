"""run_summary.json keeps what every call of a resumed run measured."""

import json

from engine.agents.run_dir import write_summary


def test_a_resumed_call_keeps_the_first_calls_figures(tmp_path):
    write_summary(tmp_path, {"episodes": 8, "skipped": 0, "seconds": 524.5, "episodes_per_hour": 54.9})
    report = write_summary(tmp_path, {"episodes": 0, "skipped": 8, "seconds": 0.0, "episodes_per_hour": 0.0})
    saved = json.loads((tmp_path / "run_summary.json").read_text())
    assert saved == report and saved["episodes"] == 0
    assert saved["earlier_calls"] == [{"episodes": 8, "skipped": 0, "seconds": 524.5, "episodes_per_hour": 54.9}]
    write_summary(tmp_path, {"episodes": 0, "skipped": 8, "seconds": 0.0, "episodes_per_hour": 0.0})
    calls = json.loads((tmp_path / "run_summary.json").read_text())["earlier_calls"]
    assert [c["episodes"] for c in calls] == [8, 0] and all("earlier_calls" not in c for c in calls)


def test_a_torn_summary_is_replaced(tmp_path):
    (tmp_path / "run_summary.json").write_text('{"episodes": 3, "secon')
    assert write_summary(tmp_path, {"episodes": 1})["earlier_calls"] == []


def test_the_model_comparison_times_every_call_that_ran_episodes(tmp_path):
    from benchmarks.compare_models import throughput

    write_summary(tmp_path, {"episodes": 6, "seconds": 300.0})
    write_summary(tmp_path, {"episodes": 2, "seconds": 100.0})
    resumed = write_summary(tmp_path, {"episodes": 0, "seconds": 0.0})
    assert throughput(resumed) == {"episodes_per_hour": 72.0, "episodes_timed": 8, "seconds": 400.0,
                                   "episodes_this_call": 0}
    assert throughput({"episodes": 0, "seconds": 0.0})["episodes_per_hour"] is None
