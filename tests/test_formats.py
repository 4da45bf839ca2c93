"""Canonical formats: round trips, page normalisation and line-numbered errors."""

import json

import pytest

from engine.datasets import Evidence, Prediction, Question, load_predictions, load_questions, parse_page, write_jsonl
from tools.errors import DossierError


def test_parse_page_accepts_ints_and_numeric_strings():
    assert parse_page(3, "x") == 3
    assert parse_page(" 12 ", "x") == 12
    assert parse_page(4.0, "x") == 4
    for bad in (0, -1, "p3", None, True, 1.5):
        with pytest.raises(DossierError):
            parse_page(bad, "x")


def test_question_round_trip_keeps_extra_fields(tmp_path):
    obj = {"id": "q1", "question": "Who?", "answer_variants": [["A", "B"], ["C"]],
           "evidence": [{"document": "d", "page": "2"}], "category": "menu"}
    q = Question.from_json(obj, "t")
    assert q.evidence == [Evidence("d", 2)]
    assert q.to_json()["category"] == "menu"
    assert q.to_json()["evidence"] == [{"document": "d", "page": 2}]


def test_loaders_report_bad_lines_with_numbers(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(
        json.dumps({"id": "1", "question": "a", "answer_variants": [["x"]], "evidence": []}) + "\n"
        "{not json\n"
        "\n"
        + json.dumps({"question": "no id"}) + "\n"
        + json.dumps({"id": "2", "question": "b", "evidence": [{"document": "d", "page": 0}]}) + "\n"
    )
    questions, errors = load_questions(path)
    assert [q.id for q in questions] == ["1"]
    assert [e.line for e in errors] == [2, 4, 5]
    assert "not valid JSON" in errors[0].reason
    assert "1-indexed" in errors[2].reason


def test_prediction_round_trip(tmp_path):
    p = Prediction("1", "q", ["a", "b"], [Evidence("d", 1)], ["query"], 2, {"tokens": 5})
    path = tmp_path / "p.jsonl"
    write_jsonl(path, [p])
    loaded, errors = load_predictions(path)
    assert errors == []
    assert loaded[0] == p


def test_predictions_accept_madqa_file_citations_and_drop_only_bad_ones(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "1", "question": "q", "answer": "a",
                                "citations": [{"file": "report.pdf", "page": 3}, {"document": "x", "page": 0}]}) + "\n")
    loaded, errors = load_predictions(path)
    assert errors == []
    assert loaded[0].citations == [Evidence("report", 3)]
    assert "1-indexed" in loaded[0].extra["dropped_citations"][0]
