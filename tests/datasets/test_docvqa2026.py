"""DocVQA-2026 importer: both published record shapes, list-literal answers, page images to PDFs, bad records."""

import io
import json

import pytest
from PIL import Image

from engine.datasets.docvqa2026 import answer_variants, import_docvqa2026
from engine.datasets.importers import import_questions


def _png(width: int, height: int, colour=(255, 0, 0)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def _record(doc="maps_2", pages=2, columnar=True):
    ids, texts, answers = [f"{doc}_q1", f"{doc}_q2"], ["Which road?", "How many towns?"], ["Macadam & Gravel", "['7', 'seven']"]
    if columnar:
        questions = {"question_id": ids, "question": texts}
        gold = {"question_id": ids, "answer": answers}
    else:
        questions = [{"question_id": i, "question": t} for i, t in zip(ids, texts)]
        gold = [{"question_id": i, "answer": a} for i, a in zip(ids, answers)]
    return {"doc_id": doc, "doc_category": "maps", "questions": questions, "answers": gold,
            "document": [{"bytes": _png(300, 450 + i), "path": None} for i in range(pages)]}


def test_answer_variants_follow_the_evaluators_list_literals():
    assert answer_variants("['7', 'seven']") == [["7"], ["seven"]]
    assert answer_variants("Macadam & Gravel") == [["Macadam & Gravel"]]
    assert answer_variants("[unclosed") == [["[unclosed"]]
    assert answer_variants("42") == [["42"]]  # a literal that is not a list stays the text
    assert answer_variants(None) == []


def test_parquet_both_shapes_and_pdfs(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    import pymupdf

    records = [_record("maps_2", pages=3), _record("comics_1", pages=1)]
    table = pa.Table.from_pylist(records)
    pq.write_table(table, tmp_path / "val.parquet")
    questions, errors, info = import_docvqa2026(tmp_path / "val.parquet", tmp_path / "pdfs")
    assert errors == []
    assert [q.id for q in questions] == ["maps_2_q1", "maps_2_q2", "comics_1_q1", "comics_1_q2"]
    q = questions[1]
    assert q.answer_variants == [["7"], ["seven"]] and q.evidence == []
    assert q.extra["document"] == "maps_2" and q.extra["document_category"] == "maps"
    assert info == {"documents": 2, "pdfs_written": 2, "pdfs_kept": 0, "pages": 4}
    doc = pymupdf.open(tmp_path / "pdfs" / "maps_2.pdf")
    assert doc.page_count == 3
    assert round(doc[2].rect.width) == round(300 * 72 / 150) and round(doc[2].rect.height) == round(452 * 72 / 150)
    assert len(doc[0].get_images()) == 1 and doc[0].get_text().strip() == ""  # image only: ingest OCRs it
    # a second import keeps the PDFs already written
    _, _, again = import_docvqa2026(tmp_path / "val.parquet", tmp_path / "pdfs")
    assert again["pdfs_written"] == 0 and again["pdfs_kept"] == 2


def test_json_list_with_row_objects_paths_and_bad_records(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "p1.png").write_bytes(_png(200, 200))
    good = _record("slides_1", columnar=False)
    good["document"] = ["images/p1.png"]
    missing_image = _record("slides_2")
    missing_image["document"] = ["images/nope.png"]
    no_questions = {"doc_id": "x"}
    test_split = {"doc_id": "t_1", "doc_category": "slides",
                  "questions": {"question_id": ["t_1_q1"], "question": ["Hidden answer?"]}}
    path = tmp_path / "val.json"
    path.write_text(json.dumps([good, missing_image, no_questions, test_split]))
    questions, errors, info = import_docvqa2026(path, tmp_path / "pdfs")
    assert [q.id for q in questions] == ["slides_1_q1", "slides_1_q2"]  # t_1 has no images: its PDF cannot be made
    reasons = {e.line: e.reason for e in errors}
    assert "images/nope.png" in reasons[2] and "not found" in reasons[2]
    assert "missing field 'questions'" in reasons[3]
    assert "no page images" in reasons[4]
    assert info["pdfs_written"] == 1
    # without --pdfs the test split's questions import, with no answer variants
    questions, errors = import_questions("docvqa2026", path)
    assert [q.id for q in questions][-1] == "t_1_q1" and questions[-1].answer_variants == []
    assert len(errors) == 1 and errors[0].line == 3


def test_cli_import_docvqa2026(tmp_path):
    from typer.testing import CliRunner

    from engine.cli.main import app

    path = tmp_path / "val.jsonl"
    # bytes are not JSON: a JSONL export carries data URLs
    record = _record("maps_9", pages=2)
    import base64

    record["document"] = ["data:image/png;base64," + base64.b64encode(_png(100, 100)).decode() for _ in range(2)]
    path.write_text(json.dumps(record) + "\n")
    result = CliRunner().invoke(app, ["import", "docvqa2026", str(path), "--out", str(tmp_path / "q.jsonl"),
                                      "--pdfs", str(tmp_path / "pdfs")])
    assert result.exit_code == 0, result.output
    assert "wrote 2 questions" in result.output and "1 document: 1 PDF written (2 pages), 0 kept" in result.output
    result = CliRunner().invoke(app, ["import", "financebench", str(path), "--out", str(tmp_path / "f.jsonl"),
                                      "--pdfs", str(tmp_path / "pdfs")])
    assert result.exit_code == 1 and "--pdfs is for docvqa2026" in str(result.exception)
