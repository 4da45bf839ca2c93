"""`dossier eval` and its subcommands through Typer's CliRunner (and one real process for the error path)."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from engine.cli.main import app
from tools.errors import DossierError

runner = CliRunner()


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def gold_rows(n=10):
    return [{"id": f"q{i}", "question": f"Question {i}?", "answer_variants": [[f"answer {i}"]],
             "evidence": [{"document": f"doc{i % 3}", "page": i + 1}], "domain": "Financial" if i % 2 else "Legal"}
            for i in range(n)]


def prediction_rows(right, n=10):
    return [{"id": f"q{i}", "question": f"Question {i}?", "answer": f"answer {i}" if i in right else "nope",
             "citations": [{"document": f"doc{i % 3}", "page": i + 1}], "search_history": ["q"] * (1 + i % 4)}
            for i in range(n)]


@pytest.fixture()
def run_dir(tmp_path):
    gold = write_jsonl(tmp_path / "questions.jsonl", gold_rows())
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "model": "default", "questions": str(gold)}))
    write_jsonl(run / "predictions.jsonl", prediction_rows(right=range(6)))
    episodes = [{"id": f"q{i}", "question": f"Question {i}?", "steps": [
        {"tool_call": {"name": "search", "arguments": {"query": f"question {i}"}},
         "tool_result": {"pages": [{"document": f"doc{i % 3}", "page": i + 1}]}},
        {"tool_call": {"name": "search", "arguments": {"query": f"answer for {i}"}}, "tool_result": {"pages": []}},
        {"tool_call": {"name": "answer", "arguments": {"answer": [f"answer {i}" if i < 6 else "nope"]}},
         "tool_result": None}]} for i in range(10)]
    write_jsonl(run / "trajectories.jsonl", episodes)
    return run


def test_eval_run_dir_needs_no_gold_and_writes_reports(run_dir, monkeypatch):
    class FakeEmbedder:  # the real model is exercised in test_steps.py
        def __call__(self, texts):
            import numpy as np

            return np.array([[1.0, float(len(t))] for t in texts])

    monkeypatch.setattr("engine.eval.embeddings.MiniLMEmbedder", FakeEmbedder)
    result = runner.invoke(app, ["eval", str(run_dir), "--format", "json", "--bootstrap", "100"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["n"] == 10 and report["accuracy"] == pytest.approx(0.6)
    assert report["steps"]["accuracy_at_budget"][2]["accuracy"] == pytest.approx(0.6)
    assert report["steps"]["query_drift"]["n"] == 10
    assert report["files"]["html"] == str(run_dir / "eval" / "report.html")
    for name in ("report.json", "report.md", "report.html", "items.jsonl"):
        assert (run_dir / "eval" / name).is_file()


def test_eval_predictions_file_human_output(tmp_path):
    gold = write_jsonl(tmp_path / "q.jsonl", gold_rows())
    preds = write_jsonl(tmp_path / "p.jsonl", prediction_rows(right={0, 1, 2})[:-1])  # q9 missing
    result = runner.invoke(app, ["eval", str(preds), "--gold", str(gold), "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    assert "10 gold items, 9 predictions (1 gold items without prediction, counted wrong" in result.output
    assert "accuracy (ANLS* ≥ 0.5)" in result.output and "30.0%" in result.output
    assert "taxonomy: correct 3" in result.output and "reports:" not in result.output  # no --out, no files
    same = runner.invoke(app, ["eval", "score", str(preds), "--gold", str(gold), "--bootstrap", "0"])
    assert same.output == result.output  # `score` is what `dossier eval PRED` runs


def test_eval_errors_name_the_bad_input(tmp_path):
    preds = write_jsonl(tmp_path / "p.jsonl", prediction_rows(right=set()))
    result = runner.invoke(app, ["eval", str(preds)])
    assert isinstance(result.exception, DossierError) and "--gold" in str(result.exception)
    result = runner.invoke(app, ["eval", str(tmp_path / "missing.jsonl"), "--gold", str(preds)])
    assert "no such file" in str(result.exception)
    process = subprocess.run([sys.executable, "-m", "engine.cli.main", "eval", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
    assert process.returncode == 1 and "without run.json" in process.stderr and "DOSSIER_DEBUG" in process.stderr


def test_judge_flag_without_engine_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "engine.core.llm_engine", None)
    gold = write_jsonl(tmp_path / "q.jsonl", gold_rows())
    preds = write_jsonl(tmp_path / "p.jsonl", prediction_rows(right={1}))
    result = runner.invoke(app, ["eval", str(preds), "--gold", str(gold), "--judge", "qwen"])
    assert "needs Dossier's inference engine" in str(result.exception)


def test_compare_two_systems(tmp_path):
    gold = write_jsonl(tmp_path / "q.jsonl", gold_rows())
    for name, right in (("a", set(range(6))), ("b", {0, 1, 6})):
        preds = write_jsonl(tmp_path / f"{name}.jsonl", prediction_rows(right))
        assert runner.invoke(app, ["eval", str(preds), "-g", str(gold), "--out", str(tmp_path / name),
                                   "--bootstrap", "0"]).exit_code == 0
    result = runner.invoke(app, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["both_correct"], out["only_a_correct"], out["only_b_correct"], out["both_wrong"]) == (2, 4, 1, 3)
    assert out["mcnemar_p"] == pytest.approx(2 * 6 / 32)
    assert out["cohen_kappa"] == pytest.approx((0.5 - 0.46) / 0.54)
    human = runner.invoke(app, ["eval", "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "-g", str(gold)])
    assert "both correct 2 · only A 4 · only B 1 · both wrong 3" in human.output
    assert "McNemar exact p = 0.375" in human.output


def test_splits_from_three_systems(tmp_path):
    gold = write_jsonl(tmp_path / "q.jsonl", gold_rows())
    dirs = []
    for name, right in (("s1", set(range(8))), ("s2", set(range(5))), ("s3", {0, 1})):
        dirs.append(str(write_jsonl(tmp_path / f"{name}.jsonl", prediction_rows(right))))
    result = runner.invoke(app, ["eval", "splits", *dirs, "-g", str(gold), "--out", str(tmp_path / "splits"),
                                 "--test-size", "4", "--dev-size", "2"])
    assert result.exit_code == 0, result.output
    assert "3 systems x 10 items -> test 4 (1 sentinel), dev 2, train 4" in result.output
    saved = json.loads((tmp_path / "splits" / "splits.json").read_text())
    assert len(saved["splits"]["test"]) == 4 and saved["sentinel"] == ["q8"]
    assert len((tmp_path / "splits" / "item_statistics.jsonl").read_text().splitlines()) == 10


def test_calibrate_judge(tmp_path):
    labels = write_jsonl(tmp_path / "labels.jsonl", [{"human": "correct", "judge": "correct"}] * 49
                         + [{"human": "correct", "judge": "incorrect"}] + [{"human": "incorrect", "judge": "incorrect"}] * 10)
    result = runner.invoke(app, ["eval", "calibrate-judge", str(labels)])
    assert result.exit_code == 0, result.output
    assert "q1 (sensitivity) = 0.980" in result.output and "over 50 human-correct items" in result.output
    assert "q0 (specificity) = 1.000" in result.output
    assert "--q1 0.98 --q0 1 --judge-m1 50 --judge-m0 10" in result.output


def test_judge_flag_scores_semantic_accuracy_on_the_engine(tmp_path, monkeypatch):
    from engine.eval.judge import Verdict
    from engine.eval.judging import BatchedJudge

    batches = []

    def judge_all(self, items, on_verdict):  # the engine's part, replaced: every judged answer is partial
        batches.append((self.model, len(items), self.engine_kwargs.get("deterministic")))
        for item in items:
            on_verdict(item, Verdict.partial, '{"verdict": "partial"}')

    monkeypatch.setattr(BatchedJudge, "judge_all", judge_all)
    gold = write_jsonl(tmp_path / "q.jsonl", gold_rows(4))
    preds = write_jsonl(tmp_path / "p.jsonl", prediction_rows(right={0, 1}, n=4))  # q2, q3 answer "nope"
    result = runner.invoke(app, ["eval", str(preds), "--gold", str(gold), "--judge", "some-model", "--bootstrap", "0",
                                 "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    # raw (1 + 1 + .5 + .5) / 4 = .75; only the two judged answers are corrected: (2 + 2 * .5 / .98) / 4 = 75.5%
    assert "75.5%" in result.output and "2 judge calls" in result.output
    assert batches == [("some-model", 2, True)]  # both answers in one batch, batch-invariant by default
    runner.invoke(app, ["eval", str(preds), "--gold", str(gold), "--judge", "some-model", "--bootstrap", "0",
                        "--no-judge-deterministic"])
    assert batches[-1] == ("some-model", 2, False)
