"""The foundation commands end to end through the CLI: sample → ingest → index → search → retrieval-eval."""

import json

from typer.testing import CliRunner

from engine.cli.main import app

runner = CliRunner()


def _ok(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_sample_ingest_index_search_and_retrieval_eval(tmp_path):
    _ok(["sample", "--out", str(tmp_path / "s")])
    report = json.loads(_ok(["ingest", str(tmp_path / "s" / "pdfs"), "--corpus", str(tmp_path / "c"), "--format", "json"]))
    assert report["documents"] == 6 and report["pages"] == 14 and report["errors"] == []
    assert {"documents", "pages", "errors", "pages_per_second"} <= report.keys()
    again = json.loads(_ok(["ingest", str(tmp_path / "s" / "pdfs"), "--corpus", str(tmp_path / "c"), "--format", "json"]))
    assert again["documents"] == 0 and again["skipped"] == 6
    _ok(["index", "--corpus", str(tmp_path / "c")])
    hits = json.loads(_ok(["search", "--corpus", str(tmp_path / "c"), "spaghetti clams", "--format", "json"]))
    assert hits[0]["document"] == "harbor-cafe-menu" and hits[0]["page"] == 1
    assert set(hits[0]) == {"document", "page", "score", "snippet"} and "**Spaghetti**" in hits[0]["snippet"]
    metrics = json.loads(_ok(["retrieval-eval", "--corpus", str(tmp_path / "c"),
                              "--questions", str(tmp_path / "s" / "questions.jsonl"), "--format", "json"]))
    assert metrics["questions"] == 20 and 0 < metrics["page_recall"] <= 1
    assert {"page_recall", "doc_recall", "mrr", "questions"} <= metrics.keys()
    listing = _ok(["corpus", "list", "--corpus", str(tmp_path / "c")])
    assert "6 documents, 14 pages" in listing


def test_user_errors_are_one_line_with_exit_code_1(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "engine.cli.main", "search", "--corpus", str(tmp_path), "x"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and "is not a corpus" in proc.stderr and "Traceback" not in proc.stderr


def test_syntax_error_shows_the_position(tmp_path):
    _ok(["sample", "--out", str(tmp_path / "s")])
    _ok(["ingest", str(tmp_path / "s" / "pdfs"), "--corpus", str(tmp_path / "c")])
    _ok(["index", "--corpus", str(tmp_path / "c")])
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "engine.cli.main", "search", "--corpus", str(tmp_path / "c"),
                           '"net income'], capture_output=True, text=True)
    assert proc.returncode == 1 and "unclosed quote" in proc.stderr and "^" in proc.stderr


def test_all_files_bad_exits_1(tmp_path):
    (tmp_path / "bad.pdf").write_bytes(b"nope")
    result = runner.invoke(app, ["ingest", str(tmp_path / "bad.pdf"), "--corpus", str(tmp_path / "c")])
    assert result.exit_code == 1 and "not a PDF" in result.output


def test_late_rerank_through_index_search_and_retrieval_eval(tmp_path):
    _ok(["sample", "--out", str(tmp_path / "s")])
    _ok(["ingest", str(tmp_path / "s" / "pdfs"), "--corpus", str(tmp_path / "c"), "--ocr", "none"])
    built = json.loads(_ok(["index", "--corpus", str(tmp_path / "c"), "--late", "minilm", "--format", "json"]))
    assert built["late"]["pages"] == built["pages"] == 14 and built["late"]["dtype"] == "int8"
    hits = json.loads(_ok(["search", "--corpus", str(tmp_path / "c"), "spaghetti OR chowder", "--rerank", "late",
                           "--format", "json"]))
    assert hits and hits[0]["document"] == "harbor-cafe-menu"
    plain = json.loads(_ok(["retrieval-eval", "--corpus", str(tmp_path / "c"), "--questions",
                            str(tmp_path / "s" / "questions.jsonl"), "--format", "json"]))
    late = json.loads(_ok(["retrieval-eval", "--corpus", str(tmp_path / "c"), "--questions",
                           str(tmp_path / "s" / "questions.jsonl"), "--rerank", "late", "--format", "json"]))
    assert late["rerank"] == "late" and late["questions"] == plain["questions"] == 20
    assert late["doc_hit"] >= 0.8  # the reranker reorders BM25's candidates; it must not lose them
