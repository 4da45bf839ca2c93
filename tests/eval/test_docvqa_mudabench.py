"""DocVQA-2026 binary scoring and MuDABench's tolerance and coverage, on hand-worked cases."""

import pytest

from engine.eval.metrics.docvqa import docvqa_correct, extract_final_answer
from engine.eval.metrics.mudabench import (
    combine_coverage,
    coverage_for_question,
    extract_numbers,
    metric_columns,
    mudabench_answer_correct,
    numeric_match,
    tolerance_row_judge,
)


@pytest.mark.parametrize(
    ("output", "gold", "expected"),
    [
        ("Reasoning... FINAL ANSWER: 50 kg", ["50 kg"], True),
        ("FINAL ANSWER: 50kg", ["50 kg"], True),  # the unit is what follows the number
        ("FINAL ANSWER: 50.0 kg", ["50 kg"], True),  # numbers compared as numbers
        ("FINAL ANSWER: 50 kilograms", ["50 kg"], False),  # units must be identical
        ("FINAL ANSWER: 51 kg", ["50 kg"], False),  # numeric gold: no fuzzy fallback
        ("FINAL ANSWER: 1,000", ["1000"], False),  # thousands separators are a different answer
        ("FINAL ANSWER: January 5, 2024", ["2024-01-05"], True),  # dates parsed
        ("FINAL ANSWER: 2024-01-06", ["2024-01-05"], False),
        ("FINAL ANSWER: March 2024", ["2024-03-01"], True),  # missing day -> 1st, never today's date
        ("FINAL ANSWER: 1.2.3", ["1.2.3"], True),  # version strings
        ("FINAL ANSWER: 1.2.4", ["1.2.3"], False),
        ("FINAL ANSWER: The Eiffel Tower.", ["eiffel tower"], True),  # articles and punctuation dropped
        ("FINAL ANSWER: Eiffel Towr", ["Eiffel Tower"], True),  # similarity 11/12 >= 0.9
        ("FINAL ANSWER: Eifel Towr", ["Eiffel Tower"], False),  # 10/12 < 0.9
        ("FINAL ANSWER: Paris", ["Lyon", "paris"], True),  # any gold answer
        ("FINAL ANSWER: abcdefghiz", ["abcdefghij"], True),  # similarity exactly 0.9 passes
        ("FINAL ANSWER: abcdefghyz", ["abcdefghij"], False),  # 0.8
        ("first FINAL ANSWER: x then FINAL ANSWER: Paris", ["Paris"], True),  # the last marker counts
        (["Alpha", "Beta"], ["alpha, beta"], True),  # a list answer is written "A, B"
        (None, ["x"], False),
        ("FINAL ANSWER: ", ["x"], False),
    ],
)
def test_docvqa_binary_scoring(output, gold, expected):
    assert docvqa_correct(output, gold) is expected


def test_docvqa_marker_rule():
    assert docvqa_correct("50 kg", ["50 kg"]) is True  # Dossier's agents answer through a tool call
    assert docvqa_correct("50 kg", ["50 kg"], require_marker=True) is False  # the competition's rule
    assert extract_final_answer("no marker", require_marker=True) is None


@pytest.mark.parametrize(
    ("predicted", "gold", "expected"),
    [
        ("12.31", "12.34", True),  # integer digits and first decimal agree
        ("12.3", "12.34", True),
        ("12.4", "12.36", False),  # rounding is not enough
        ("1,234.56", 1234.5, True),
        ("-3.17", "-3.19", True),
        ("7", "7.05", True),
        ("7", "7.15", False),
        ("about 12.3%", "12.37%", True),
        ("no number", "1.0", False),
        (0.3, "0.35", True),
        ("1" * 40, "5", False),  # a model's 40-digit "number" is a wrong answer, not a crash of the evaluation
        ("1" * 40 + ".27", "1" * 40 + ".2", True),
    ],
)
def test_mudabench_numeric_tolerance(predicted, gold, expected):
    assert numeric_match(predicted, gold) is expected


def test_mudabench_final_answer_and_numbers():
    assert extract_numbers("from 1,200.5 to -3 (2019)") == [pytest.approx(1200.5), -3, 2019]
    assert mudabench_answer_correct("The average is 12.38 million", [["12.3"]])
    assert not mudabench_answer_correct("The average is 12.48 million", [["12.3"]])
    assert mudabench_answer_correct(["Company A", "growth 5.06%"], [["company a", "5.0"]])
    assert not mudabench_answer_correct("Company B 5.0", [["company a", "5.0"]])
    assert not mudabench_answer_correct("", [["1"]]) and not mudabench_answer_correct(None, [["1"]])


def test_metric_columns_follow_mudabench_naming():
    row = {"values": {"revenue": 1, "profit": 2}, "details": {"unit": "CNY", "span_role": "x"}}
    assert list(metric_columns(row)) == ["values.profit", "values.revenue", "details.unit"]
    assert metric_columns({"fact_type": "eps"}) == {"fact_type": "eps"}


def test_coverage_hand_computed():
    rows = [{"row_index": 0, "document": "d1", "values": {"revenue": 12.34, "profit": 5.0}},
            {"row_index": 1, "document": "d2", "values": {"revenue": 8.8, "profit": 1.2}}]
    dialogs = {"d1": [{"prompt": "revenue and profit?", "answer": "revenue 12.3, profit 4.9"}]}  # d2 never asked
    first = coverage_for_question("Q", rows, dialogs, tolerance_row_judge)
    assert (first["cell_correct"], first["cell_total"]) == (1, 4)  # revenue 12.3 ok; profit 4.9 != 5.0
    assert (first["row_correct"], first["row_total"]) == (0, 2)
    assert (first["column_correct"], first["column_total"]) == (0, 2)  # revenue right in 1 of 2 rows only
    second = coverage_for_question("Q2", [{"document": "d9", "values": {"eps": "0.52", "auditor": "KPMG"}}],
                                   {"d9": "EPS was 0.529; audited by KPMG Huazhen"}, tolerance_row_judge)
    assert (second["cell_correct"], second["row_correct"], second["column_correct"]) == (2, 1, 2)
    total = combine_coverage([first, second])
    assert total["cell_accuracy"] == pytest.approx(3 / 6)
    assert total["row_accuracy"] == pytest.approx(1 / 3)
    assert total["column_accuracy"] == pytest.approx(2 / 4)


def test_coverage_ignores_fields_the_judge_invents():
    rows = [{"document": "d", "values": {"a": 1}}]
    result = coverage_for_question("Q", rows, {"d": "text"}, lambda q, r, c, d: ["values.a", "values.zzz"])
    assert (result["cell_correct"], result["cell_total"]) == (1, 1)


def test_the_papers_final_answer_judge_scores_in_place_of_the_tolerance_and_the_report_says_so():
    """MuDABench's final-answer judge (A.7.10, paraphrased) on a scripted completion: its verdicts become the
    MuDABench accuracy, and `mudabench_scoring` names the scorer; without it the tolerance rule scores."""
    import json

    from engine.datasets.formats import Prediction, Question
    from engine.eval.evaluate import EvalConfig, evaluate
    from engine.eval.metrics.mudabench import TOLERANCE_SCORER, CompletionAnswerJudge
    from engine.eval.reports.markdown import render_markdown

    prompts = []

    def complete(prompt: str) -> str:  # accepts "twelve point three", which the tolerance rule cannot read
        prompts.append(prompt)
        answer = prompt.split("The system's answer: ", 1)[1].split("\n", 1)[0]
        return json.dumps({"is_correct": "twelve point three" in answer})

    gold = [Question("a", "Average revenue?", [["12.3"]], [], {}), Question("b", "Same?", [["12.3"]], [], {}),
            Question("c", "Empty?", [["1"]], [], {})]
    preds = [Prediction("a", "", "twelve point three million", [], [], 1, {}),
             Prediction("b", "", "12.34", [], [], 1, {}), Prediction("c", "", "", [], [], 1, {})]
    rule = evaluate(gold, preds).report
    assert rule["mudabench_accuracy"] == pytest.approx(1 / 3) and rule["mudabench_scoring"] == {
        "final_answer": TOLERANCE_SCORER, "coverage": TOLERANCE_SCORER}
    judge = CompletionAnswerJudge(complete, label="LLM judge scripted (MuDABench's final-answer prompt, A.7.10)")
    judged = evaluate(gold, preds, config=EvalConfig(mudabench_judge=judge)).report
    assert judged["mudabench_accuracy"] == pytest.approx(1 / 3)  # a right, b wrong by this judge, c empty
    assert [i.mudabench for i in evaluate(gold, preds, config=EvalConfig(mudabench_judge=judge)).items] == [
        True, False, False]
    assert judged["mudabench_scoring"]["final_answer"].startswith("LLM judge scripted")
    assert len(prompts) == 4 and judge.judged == 4  # two calls per evaluate: the empty answer is never judged
    assert "Reference answer: 12.3" in prompts[0] and "integer digits and its first decimal place" in prompts[0]
    assert "| MuDABench judge |" in render_markdown(judged) and "| MuDABench tolerance |" in render_markdown(rule)


def test_the_final_answer_judge_retries_an_unreadable_reply_then_counts_it_wrong():
    from engine.eval.metrics.mudabench import CompletionAnswerJudge, parse_final_answer

    replies = iter(["I think so", "still no json", '{"is_correct": true}'])
    judge = CompletionAnswerJudge(lambda prompt: next(replies))
    assert judge("q", [["1"]], "1") is False and judge.unparsed == 1  # two unreadable replies
    assert judge("q", [["1"]], "1") is True
    assert parse_final_answer('{"is_correct": "yes"}') is None and parse_final_answer('x {"is_correct": false}') is False
