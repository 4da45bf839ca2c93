"""Guessability classes of a closed-book run (MADQA Appendix E.2): yes/no, binary choice, memorisation."""

import pytest

from engine.datasets.formats import Prediction, Question
from engine.eval.analyses.guessability import guess_class, guessability
from engine.eval.evaluate import EvalConfig, evaluate


@pytest.mark.parametrize(
    "question, variants, expected",
    [
        ("Is the library open on Sundays?", [["Yes"]], "yes_no"),
        ("Did the board approve the budget?", [["no."], ["No"]], "yes_no"),
        ("Which is more expensive, the chowder or the salad?", [["the chowder"], ["chowder"]], "binary_choice"),
        ("Was revenue higher in 2022 or 2023?", [["2023"]], "binary_choice"),
        ("Which colour was chosen: red, green, or blue?", [["green"]], "memorisation"),  # three options
        ("Who signed it, the CEO or the CFO?", [["Helen Marsh"]], "memorisation"),  # the answer is neither option
        ("What is the member ID on the form?", [["GL-20417"]], "memorisation"),
        ("Is the fee $10 or $12?", [["$12"]], "binary_choice"),  # punctuation does not decide
        ("Was it approved, and by whom?", [["Yes", "the board"]], "memorisation"),  # a list, not yes/no
    ],
)
def test_guess_class(question, variants, expected):
    assert guess_class(question, variants) == expected


ROWS = [("Is it open?", [["yes"]], True), ("Chowder or salad?", [["salad"]], True),
        ("Was it 2022 or 2023?", [["2022"]], False), ("What is the ID?", [["GL-1"]], True),
        ("Who signed?", [["Ana"]], False), ("When?", [["May"]], False)]


def test_accuracy_per_class_and_the_decomposition():
    out = guessability(ROWS)
    classes = out["classes"]
    assert (classes["yes_no"]["n"], classes["yes_no"]["correct"]) == (1, 1)
    assert (classes["binary_choice"]["n"], classes["binary_choice"]["correct"]) == (2, 1)
    assert (classes["memorisation"]["n"], classes["memorisation"]["correct"]) == (3, 1)
    assert classes["binary_choice"]["accuracy"] == 0.5 and classes["memorisation"]["chance"] is None
    assert out["accuracy"] == pytest.approx(3 / 6)
    assert out["chance_share"] == pytest.approx(0.5 * 3 / 6)  # half of the three two-way questions
    assert out["memorised_share"] == pytest.approx(1 / 6)


def _run(agent):
    gold = [Question.from_json({"id": f"g{i}", "question": q, "answer_variants": v, "evidence": []}, "gold")
            for i, (q, v, _) in enumerate(ROWS)]
    predictions = [Prediction.from_json({"id": f"g{i}", "question": q, "answer": (v[0] if right else ["nope"]),
                                         **({"agent": agent} if agent else {})}, "p")
                   for i, (q, v, right) in enumerate(ROWS)]
    return gold, predictions


def test_reported_only_for_closed_book_runs():
    report = evaluate(*_run("closed-book"), config=EvalConfig(bootstrap=0)).report
    assert report["guessability"]["classes"]["yes_no"]["correct"] == 1 and report["guessability"]["n"] == 6
    assert evaluate(*_run("bm25"), config=EvalConfig(bootstrap=0)).report["guessability"] is None
    # without an "agent" field on the predictions, run.json's agent (passed by `dossier eval`) decides
    assert evaluate(*_run(None), config=EvalConfig(bootstrap=0)).report["guessability"] is None
    assert evaluate(*_run(None), config=EvalConfig(bootstrap=0, agent="closed-book")).report["guessability"]


def test_dossier_eval_on_a_closed_book_run_directory_prints_the_classes(tmp_path):
    import json

    from typer.testing import CliRunner

    from engine.cli.main import app

    gold, predictions = _run(None)  # no "agent" on the predictions: run.json says closed-book
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q.to_json()) + "\n" for q in gold))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"agent": "closed-book", "questions": str(tmp_path / "q.jsonl")}))
    (run / "predictions.jsonl").write_text("".join(json.dumps(p.to_json()) + "\n" for p in predictions))
    result = CliRunner().invoke(app, ["eval", str(run), "--out", str(tmp_path / "eval"), "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    assert ("closed-book guessability 50.0% of 6: yes/no 1/1 · binary choice (A or B) 1/2 · "
            "other (memorisation) 1/3; chance share 25.0%, memorised share 16.7%") in result.output
    assert "Kuiper by effort measure: steps — (6 missing)" in result.output  # no searches, no iterations recorded
    html = (tmp_path / "eval" / "report.html").read_text()
    assert 'id="plot-guessability"' in html
    assert "## Guessability (closed-book" in (tmp_path / "eval" / "report.md").read_text()
