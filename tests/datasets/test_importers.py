"""Importers: page indexing conventions of each benchmark, and malformed lines reported, never dropped."""

import json

import pytest

from engine.datasets import Evidence
from engine.datasets.importers import import_questions, mudabench_question_id
from tools.errors import DossierError


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_financebench_pages_become_one_indexed(tmp_path):
    row = {"financebench_id": "fb1", "company": "3M", "doc_name": "3M_2018_10K", "question": "Capex?",
           "answer": "$1577.00", "question_type": "metrics-generated",
           "evidence": [{"evidence_text": "...", "doc_name": "3M_2018_10K", "evidence_page_num": 59},
                        {"evidence_text": "...", "doc_name": "3M_2018_10K", "evidence_page_num": 0}]}
    path = _jsonl(tmp_path / "fb.jsonl", [row, "{broken", {"question": "no id"}])
    questions, errors = import_questions("financebench", path)
    assert len(questions) == 1
    q = questions[0]
    assert q.id == "fb1" and q.answer_variants == [["$1577.00"]]
    assert q.evidence == [Evidence("3M_2018_10K", 60), Evidence("3M_2018_10K", 1)]
    assert q.extra["company"] == "3M" and q.extra["category"] == "metrics-generated"
    assert [(e.line, "JSON" in e.reason or "missing" in e.reason) for e in errors] == [(2, True), (3, True)]


def test_mmlongbench_string_pages_and_list_answers(tmp_path):
    items = [
        {"doc_id": "PH_2016.pdf", "doc_type": "Research report", "question": "Which group?",
         "answer": "['White', '10%']", "evidence_pages": "[11]", "evidence_sources": "['Chart']",
         "answer_format": "List"},
        {"doc_id": "PH_2016.pdf", "question": "Unanswerable?", "answer": "Not answerable",
         "evidence_pages": "[]", "answer_format": "None"},
        {"doc_id": "PH_2016.pdf", "question": "Bad pages", "answer": "x", "evidence_pages": "[five]"},
    ]
    path = tmp_path / "samples.json"
    path.write_text(json.dumps(items))
    questions, errors = import_questions("mmlongbench", path)
    assert [q.id for q in questions] == ["mmlongbench-00001", "mmlongbench-00002"]
    assert questions[0].answer_variants == [["White", "10%"]]
    assert questions[0].evidence == [Evidence("PH_2016", 11)]
    assert questions[1].evidence == []
    assert len(errors) == 1 and errors[0].line == 3 and "evidence_pages" in errors[0].reason


def test_madqa_passes_through_with_string_pages_normalised(tmp_path):
    row = {"id": "m1", "question": "Q?", "answer_variants": [["a"]], "category": "menu",
           "evidence": [{"document": "menu.pdf", "page": "3"}]}
    questions, errors = import_questions("madqa", _jsonl(tmp_path / "m.jsonl", [row, row]))
    assert questions[0].evidence == [Evidence("menu", 3)] and questions[0].extra["category"] == "menu"
    assert len(errors) == 1 and "duplicate id" in errors[0].reason


def test_mudabench_ids_and_metadata(tmp_path):
    metadata = [{"symbol": "002142", "year": 2021, "value_x": 15.44, "id": "doc-a", "doctype": "A"},
                {"symbol": "002839", "year": 2021, "value_x": 14.3, "id": "doc-b", "doctype": "A"}]
    item = {"question": " Top bank? ", "metadata": metadata, "source_answer": ["a", "b"], "final_answer": "002142"}
    path = tmp_path / "simple.json"
    path.write_text(json.dumps([item, {"question": "missing answer", "metadata": []}]))
    questions, errors = import_questions("mudabench", path)
    q = questions[0]
    assert q.id == mudabench_question_id(" Top bank? ", metadata) and q.id.startswith("q_") and len(q.id) == 18
    assert q.extra["evidence_documents"] == ["doc-a", "doc-b"] and q.answer_variants == [["002142"]]
    assert len(errors) == 1 and "final_answer" in errors[0].reason


def test_unknown_benchmark_and_missing_file(tmp_path):
    with pytest.raises(DossierError, match="unknown benchmark"):
        import_questions("docvqa", tmp_path / "x")
    with pytest.raises(DossierError, match="no such file"):
        import_questions("madqa", tmp_path / "missing.jsonl")


@pytest.mark.shared
def test_real_financebench_file(shared_dir):
    questions, errors = import_questions("financebench", shared_dir / "data/financebench/financebench_open_source.jsonl")
    assert len(questions) == 100 and errors == []
    assert all(e.page >= 1 for q in questions for e in q.evidence)
