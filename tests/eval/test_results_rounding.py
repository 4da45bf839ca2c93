"""`scripts/results.sh --check` compares figures at the precision the tables print, and fits are stored rounded.

An AVX2 machine re-scored qguide-sample with a token-cost fit that differed from the stored one in the 14th
digit, and --check failed although no printed figure differed (issue 50 items 7 and 8).
"""

from __future__ import annotations

import json

import pytest

from engine.datasets.formats import Question
from engine.eval.analyses.qguide import qguide_analyses
from engine.eval.trajectories import parse_episode
from tests.scripts import load_script

FIT_DECIMALS = 6  # engine/eval/analyses/qguide.py stores fits with at most this many decimals

results = load_script("results")

QUESTIONS = [{"id": f"q{i}", "question": f"Revenue in year {i}?", "answer_variants": [[str(1000 + i)]],
              "evidence": [{"document": "report", "page": 1}]} for i in range(3)]


@pytest.fixture
def stored_table(tmp_path, monkeypatch):
    """A one-row table, run and written: (root, docs)."""
    table = results.Table("rounding", "A one-row table", "sample", "a",
                          (results.Row("a", "a-run", "system A", ("--agent", "bm25"), model="default"),))
    monkeypatch.setitem(results.TABLES, "rounding", table)
    monkeypatch.setattr(results, "model_record", lambda m: {"name": m, "sha256": "0" * 64, "source": "test"})
    root, docs = tmp_path / "runs", tmp_path / "docs"
    questions = root / "sample" / "questions.jsonl"
    questions.parent.mkdir(parents=True)
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    run = root / "runs" / "sample-a-run"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "model": "default", "questions": str(questions)}))
    (run / "predictions.jsonl").write_text("".join(json.dumps(
        {"id": q["id"], "question": q["question"], "answer": [a], "citations": [], "iterations": 1}) + "\n"
        for q, a in zip(QUESTIONS, ["1000", "1001", "nothing"])))
    (run / "results_row.json").write_text(json.dumps({"command": "dossier run ...", "segments": [
        {"started": "2026-12-01T00:00:00", "load_start": [0.1] * 3, "load_end": [0.2] * 3, "cores": 2,
         "commit": "abc", "seconds": 1.0, "dtype_auto": "float32"}]}))
    results.write_table(results.score_table(table, root, docs / "runs"), docs)
    return root, docs


def _nudge_stored_accuracy(docs, by):
    path = docs / "rounding.json"
    stored = json.loads(path.read_text())
    stored["rows"][0]["figures"]["accuracy"] += by
    path.write_text(json.dumps(stored))


def test_check_ignores_a_difference_below_the_printed_precision(stored_table, capsys):
    root, docs = stored_table
    _nudge_stored_accuracy(docs, 3e-14)  # another CPU's last digits
    assert results.main(["rounding", "--check", "--root", str(root), "--docs", str(docs)]) == 0
    assert "re-score to the same figures" in capsys.readouterr().out


def test_check_still_fails_on_a_difference_the_table_prints(stored_table, capsys):
    root, docs = stored_table
    _nudge_stored_accuracy(docs, 0.002)  # 66.7 % would print as 66.9 %
    assert results.main(["rounding", "--check", "--root", str(root), "--docs", str(docs)]) == 1
    assert "differ for a-run" in capsys.readouterr().out


def _episode(qid, pages, observations, turns):
    tokens = 300 * pages + observations + 100 * turns + (7 if qid == "b" else 0)  # not exactly linear
    cost = {"pages_in_context": pages, "turns": turns, "calls": turns, "input": tokens - 20, "output": 20,
            "computed": tokens, "cached": 0, "pages": 300 * pages, "observations": observations, "turn": 100 * turns,
            "later_rounds_input": 100, "later_rounds_cached": 50}
    record = {"gate": "med", "tools": ["text_recovery"], "confidence": "high", "submitted": ["x"],
              "decision": "passed", "answer": ["x"], "tool_calls": {}, "cost": cost,
              "budget": {"1": {"answer": ["x"]}, "2": {"answer": ["y"]}, "3": {"answer": ["y"]}}}
    return parse_episode({"id": qid, "question": "?", "steps": [], "final": {"answer": ["x"]}, "qguide": record}, "t")


def test_the_token_cost_and_budget_fits_are_stored_rounded():
    questions = [Question(q, "?", [["y"]], []) for q in "abcde"]
    shapes = {"a": (2, 100, 2), "b": (3, 50, 3), "c": (1, 400, 3), "d": (4, 0, 1), "e": (2, 30, 5)}
    episodes = {q: _episode(q, *shape) for q, shape in shapes.items()}
    analyses = qguide_analyses(questions, episodes, lambda answer, gold: answer == gold[0])
    cost_fit = analyses["cost"]["fit"]
    assert cost_fit["alpha"] == pytest.approx(300, abs=5)  # the fit itself is kept
    for key in ("alpha", "beta", "gamma", "r2"):
        assert cost_fit[key] == round(cost_fit[key], FIT_DECIMALS), (key, cost_fit[key])
    budget_fit = analyses["budget"]["fit"]
    assert budget_fit["fitted"] and all(v == round(v, FIT_DECIMALS) for v in budget_fit["fitted"])
