"""The numeric scorer (engine/eval/metrics/numeric.py): FinanceBench's numbers scored as numbers, beside ANLS*.

The four answers of issue 50 are archived FinanceBench answers of qwen2.5-1.5b: three wrong numbers that
ANLS* >= 0.5 accepts or half-accepts, and one right number it scores 0.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from engine.cli.main import app
from engine.datasets.formats import Prediction, Question
from engine.eval.scorers import registered_scorers

ISSUE_50 = [  # (answer, gold, right as a number)
    ("11.5%", "1.9%", False),
    ("0.0%", "101.5%", False),
    (".70", "1.73", False),
    ("11,588", "$11588.00", True),
]


def _numeric():
    found = [s for s in registered_scorers() if s.name == "numeric"]
    assert found, "no scorer named 'numeric' is registered in engine/eval/scorers.py"
    return found[0]


def _item(answer, gold, question="What is it?"):
    q = Question.from_json({"id": "q", "question": question, "answer_variants": [[gold]], "evidence": []}, "test")
    p = Prediction.from_json({"id": "q", "question": question, "answer": answer}, "test")
    return q, p


def test_the_issue_examples_are_scored_by_value():
    scorer = _numeric()
    for answer, gold, right in ISSUE_50:
        assert scorer.score_item(*_item(answer, gold)) is right, (answer, gold)


def test_values_are_normalised_before_the_tolerance():
    scorer = _numeric()
    cases = [
        ("$11,588.00", "11588", True),  # currency and thousands separators
        ("1.9 %", "1.9%", True), ("0.019", "1.9%", True), ("1.9", "1.9 %", True),  # percent as written or a fraction
        ("190%", "1.9%", False),  # two percents compare as percents
        ("(143)", "-143", True), ("−143", "-143", True), ("143", "-143", False),  # signs and parentheses
        ("$1.2 billion", "1200 million", True), ("1.2 thousand", "1,200", True),  # scale words, both sides
        ("1.7", "1.73", False), ("1.728", "1.73", True),  # 1 % relative: 1.7 is 1.7 % off
        ("0", "0", True), ("0.001", "0", False),  # a gold zero is exact
        ("The FY2018 figure for 3M is 1,577.", "$1577.00", True),  # FY2018 and 3M are not quantities
        ("In FY2018 capex was 2018 dollars", "$1577.00", False),
    ]
    for answer, gold, right in cases:
        assert scorer.score_item(*_item(answer, gold)) is right, (answer, gold)


def test_the_unit_the_question_asks_for_scales_the_gold():
    scorer = _numeric()
    asked = "What is the FY2018 capital expenditure amount (in USD millions) for 3M?"
    assert scorer.score_item(*_item("$1.577 billion", "$1577.00", asked)) is True
    assert scorer.score_item(*_item("$1.577 million", "$1577.00", asked)) is False  # a thousandth of it
    assert scorer.score_item(*_item(["$1,577", "3M_2018_10K, page 60"], "$1577.00", asked)) is True  # a list answer


def test_only_numeric_gold_answers_are_scored():
    scorer = _numeric()
    assert scorer.score_item(*_item("Harwell & Stone", "Harwell & Stone")) is None
    assert scorer.score_item(*_item("1.7", "The quick ratio improved from 0.67 to 0.69")) is None  # a sentence
    assert scorer.score_item(*_item(None, "1.9%")) is False  # no answer to a numeric question: wrong


def test_dossier_eval_reports_numeric_accuracy_beside_anls(tmp_path):
    gold = tmp_path / "questions.jsonl"
    rows = [{"id": f"q{i}", "question": "How much?", "answer_variants": [[g]], "evidence": []}
            for i, (_, g, _) in enumerate(ISSUE_50)]
    rows.append({"id": "t", "question": "Who?", "answer_variants": [["Ana Ruiz"]], "evidence": []})
    gold.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "questions": str(gold)}))
    answers = [a for a, _, _ in ISSUE_50] + ["Ana Ruiz"]
    (run / "predictions.jsonl").write_text("".join(
        json.dumps({"id": r["id"], "question": r["question"], "answer": a}) + "\n" for r, a in zip(rows, answers)))

    shown = CliRunner().invoke(app, ["eval", str(run), "--out", str(tmp_path / "eval"), "--bootstrap", "0",
                                     "--no-drift"])
    assert shown.exit_code == 0, shown.output
    assert "numeric (±1 %)" in shown.output
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["numeric_accuracy"] == 1 / 4  # only "11,588", of the four numeric questions
    items = [json.loads(line) for line in (tmp_path / "eval" / "items.jsonl").read_text().splitlines()]
    assert [i["numeric"] for i in items] == [False, False, False, True, None]
    # ANLS* >= 0.5, as MADQA's harness reads it, accepts the wrong ".70" and rejects the right "11,588"
    assert [i["accurate"] for i in items][2:4] == [True, False]
