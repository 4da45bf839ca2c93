"""scripts/results.py: the tables are consistent, and --check re-scores a stored run to the stored figures."""

import json

import pytest

from tests.scripts import load_script

results = load_script("results")

QUESTIONS = [
    {"id": "q1", "question": "What was revenue in 2023?", "answer_variants": [["48,250"]],
     "evidence": [{"document": "report", "page": 2}]},
    {"id": "q2", "question": "Who signed the memo?", "answer_variants": [["Ana Ruiz"]],
     "evidence": [{"document": "memo", "page": 1}]},
    {"id": "q3", "question": "What is the fee?", "answer_variants": [["$25"]],
     "evidence": [{"document": "form", "page": 1}]},
]


def _store_run(root, suite, row_id, answers):
    """A finished run directory as `dossier run` leaves it (run.json, predictions.jsonl), for one row."""
    questions = root / suite / "questions.jsonl"
    questions.parent.mkdir(parents=True, exist_ok=True)
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    run = root / "runs" / f"{suite}-{row_id}"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "model": "default", "questions": str(questions),
                                              "engine": {"dtype": "auto", "quantization": None}}))
    lines = [{"id": q["id"], "question": q["question"], "answer": [a], "citations": [q["evidence"][0]],
              "iterations": 1} for q, a in zip(QUESTIONS, answers)]
    (run / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in lines))
    (run / "results_row.json").write_text(json.dumps({"command": "dossier run ...", "segments": [
        {"started": "2026-12-01T00:00:00", "load_start": [0.1, 0.1, 0.1], "load_end": [1.9, 1.0, 0.5],
         "cores": 2, "commit": "abc", "seconds": 12.5, "dtype_auto": "float32"}]}))
    return run


@pytest.fixture
def tiny_table(monkeypatch):
    table = results.Table("tiny", "A tiny table", "sample", "a",
                          (results.Row("a", "a-run", "system A", ("--agent", "bm25"), model="default"),
                           results.Row("b", "b-run", "system B", ("--agent", "rag"), model="default"),
                           results.Row("c", "c-run", "system C, never run", ("--agent", "oracle"), model="default")),
                          claims=(results.Claim("A beats B", "a", "b"),))
    monkeypatch.setitem(results.TABLES, "tiny", table)
    monkeypatch.setattr(results, "model_record", lambda m: {"name": m, "sha256": "0" * 64, "source": "test"})
    return table


def test_tables_are_consistent():
    results.check_tables()  # one configuration per run id, references and claims name rows
    assert {"madqa-sample", "dtypes-sample", "qguide-sample", "mudabench-sample"} <= set(results.TABLES)


def test_check_rescores_a_stored_run_to_the_same_figures(tmp_path, tiny_table, capsys):
    root, docs = tmp_path / "runs", tmp_path / "docs"
    _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    _store_run(root, "sample", "b-run", ["48,250", "nobody", "unknown"])
    result = results.score_table(tiny_table, root, docs / "runs")
    results.write_table(result, docs)

    a, b, c = result["rows"]
    assert a["figures"]["correct"] == 3 and b["figures"]["correct"] == 1
    assert a["figures"]["page_f1"] == 1.0
    assert b["vs_reference"]["only_b_correct"] == 2 and b["vs_reference"]["only_a_correct"] == 0
    assert c["status"] == "not run yet"
    assert result["claims"][0]["verdict"] == "inconclusive at n = 3"  # 2 discordant pairs cannot reach p < 0.05
    assert result["min_discordant_for_p05"] == 6
    markdown = (docs / "tiny.md").read_text()
    assert "3/3 = 100.0 %" in markdown and "1/3 = 33.3 %" in markdown and "abc" in markdown

    capsys.readouterr()
    assert results.main(["tiny", "--check", "--root", str(root), "--docs", str(docs)]) == 0
    out = capsys.readouterr().out
    assert "3/3 = 100.0 %" in out and "re-score to the same figures" in out


def test_the_archive_alone_rescores_and_holds_no_machine_path(tmp_path, tiny_table, capsys):
    """A clean checkout has no run directories: --check re-scores the runs archived in the repository."""
    root, docs = tmp_path / "runs", tmp_path / "docs"
    run = _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    (run / "trajectories.jsonl").write_text("")
    _store_run(root, "sample", "b-run", ["48,250", "nobody", "unknown"])
    results.write_table(results.score_table(tiny_table, root, docs / "runs"), docs)
    archived = docs / "runs" / "sample-a-run"
    assert sorted(p.name for p in archived.iterdir()) == ["predictions.jsonl", "results_row.json", "run.json",
                                                         "trajectories.jsonl.gz"]
    assert str(root) not in (archived / "run.json").read_text()
    assert (docs / "runs" / "sample" / "questions.jsonl").is_file()

    import shutil
    shutil.rmtree(root)  # the run directories are gone, as on a clean checkout
    capsys.readouterr()
    assert results.main(["tiny", "--check", "--root", str(root), "--docs", str(docs)]) == 0
    assert "re-score to the same figures (3 rows)" in capsys.readouterr().out


def test_check_fails_when_a_stored_run_changed(tmp_path, tiny_table, capsys):
    root, docs = tmp_path / "runs", tmp_path / "docs"
    run = _store_run(root, "sample", "a-run", ["48,250", "Ana Ruiz", "$25"])
    results.write_table(results.score_table(tiny_table, root, docs / "runs"), docs)
    run = docs / "runs" / run.name  # --check reads the archive, so change the archived prediction
    lines = (run / "predictions.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["answer"] = ["12"]
    (run / "predictions.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    assert results.main(["tiny", "--check", "--root", str(root), "--docs", str(docs)]) == 1
    assert "differ for a-run" in capsys.readouterr().out


def test_unknown_table_is_refused(capsys):
    with pytest.raises(SystemExit):
        results.main(["no-such-table"])
    assert "unknown table(s) no-such-table" in capsys.readouterr().err
