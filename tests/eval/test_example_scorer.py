"""Adding a metric is one file plus one registration line (engine/eval/scorers.py), and it shows everywhere.

The example metric (tests/eval/example_scorer.py) is registered here the way `_REGISTERED` would hold it;
nothing else is edited, and it must appear in items.jsonl, report.json, report.md, report.html, the
terminal's headline and `dossier eval --format json`. If a new metric needed one more file edited, this
test would fail.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from engine.cli.main import app
from engine.eval import scorers
from engine.eval.scorers import Scorer

LINE = Scorer("short_answer", "short answer (≤ 3 words)", "tests.eval.example_scorer:short_answer",
              applies="tests.eval.example_scorer:short_gold")


def _write(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(tmp_path):
    """A run directory: four questions, three with a short gold answer; two of those three answered briefly."""
    gold = _write(tmp_path / "questions.jsonl", [
        {"id": "q0", "question": "Revenue?", "answer_variants": [["48,250"]], "evidence": []},
        {"id": "q1", "question": "Auditor?", "answer_variants": [["Harwell & Stone"]], "evidence": []},
        {"id": "q2", "question": "CEO?", "answer_variants": [["Ana Ruiz"]], "evidence": []},
        {"id": "q3", "question": "Why?", "answer_variants": [["because the plant closed in the spring"]],
         "evidence": []}])
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "questions": str(gold)}))
    _write(run / "predictions.jsonl", [
        {"id": "q0", "question": "Revenue?", "answer": "48,250"},
        {"id": "q1", "question": "Auditor?", "answer": "the auditor was Harwell and Stone"},
        {"id": "q2", "question": "CEO?", "answer": "Ana Ruiz"},
        {"id": "q3", "question": "Why?", "answer": "x"}])
    return run


def test_a_metric_is_one_file_and_one_line_and_appears_in_every_report(tmp_path, monkeypatch):
    monkeypatch.setitem(scorers._SCORERS, LINE.name, LINE)  # the one line, as _REGISTERED would hold it
    run = _run(tmp_path)
    runner = CliRunner()

    shown = runner.invoke(app, ["eval", str(run), "--out", str(tmp_path / "eval"), "--bootstrap", "0", "--no-drift"])
    assert shown.exit_code == 0, shown.output
    assert "short answer (≤ 3 words)    66.7%" in shown.output  # q0 and q2 of the three it applies to

    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["short_answer_accuracy"] == 2 / 3 and len(report["short_answer_accuracy_ci"]) == 2
    assert report["breakdowns"]["hop_type"]["single"]["short_answer_accuracy"] == 2 / 3
    assert "| short answer (≤ 3 words) | 66.7% |" in (tmp_path / "eval" / "report.md").read_text()
    assert "short answer (≤ 3 words)" in (tmp_path / "eval" / "report.html").read_text()
    items = [json.loads(line) for line in (tmp_path / "eval" / "items.jsonl").read_text().splitlines()]
    assert [i["short_answer"] for i in items] == [True, False, True, None]  # q3's gold is long: not scored

    as_json = runner.invoke(app, ["eval", str(run), "--out", str(tmp_path / "eval2"), "--bootstrap", "0",
                                  "--no-drift", "--format", "json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["short_answer_accuracy"] == 2 / 3


def test_a_registered_scorer_is_a_verdict_that_compare_can_pair_on(tmp_path, monkeypatch):
    from engine.eval.compare import compare_items
    from engine.eval.reports.files import load_item_results

    monkeypatch.setitem(scorers._SCORERS, LINE.name, LINE)
    run = _run(tmp_path)
    assert CliRunner().invoke(app, ["eval", str(run), "--out", str(tmp_path / "eval"), "--bootstrap", "0",
                                    "--no-drift"]).exit_code == 0
    items = load_item_results(tmp_path / "eval" / "items.jsonl")
    assert [item.short_answer for item in items] == [True, False, True, None]  # read back from items.jsonl
    assert [item.docvqa for item in items] == [True, False, True, False]  # the built-in scorers read the same way
    paired = compare_items(items, items, verdict="short_answer")  # a None (not scored) counts as not right
    assert paired["n_paired"] == 4 and paired["accuracy_a"] == 0.5


def test_a_scorer_line_is_checked_when_it_is_written():
    import pytest

    with pytest.raises(ValueError, match="aggregate 'median'"):
        Scorer("x", "x", "tests.eval.example_scorer:short_answer", aggregate="median")
    with pytest.raises(ValueError, match="must read 'module:function'"):
        Scorer("x", "x", "tests.eval.example_scorer.short_answer")
