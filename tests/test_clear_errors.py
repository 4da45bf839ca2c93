"""Bad input gives one line naming the file or question and what to do, never a traceback (issue 26, item 16);
a bad question is skipped and listed, and the batch goes on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.datasets.formats import load_questions
from tests.agents.scripted import build_corpus, search_then_answer
from tools.corpus import CorpusStore
from tools.errors import DossierError

ROOT = Path(__file__).resolve().parents[1]
GOOD = [{"id": "q1", "question": "What was revenue in 2019?", "answer_variants": [["$48,250"]],
         "evidence": [{"document": "report", "page": 1}]},
        {"id": "q4", "question": "How much does spaghetti cost?", "answer_variants": [["$18.00"]]}]


def _questions(path: Path) -> Path:
    path.write_bytes(json.dumps(GOOD[0]).encode() + b"\n"
                     + b'{"id": "q2", "question": "Capital expenditure in 2019?"}\n'
                     + '{"id": "q2b", "question": "Quel était le résultat ?"}\n'.encode("latin-1")
                     + b'{"id": "q3", "question": "bad \\ud800 escape"}\n'
                     + json.dumps(GOOD[1]).encode() + b"\n")
    return path


def test_finding16_a_non_utf8_line_and_a_lone_surrogate_are_skipped_with_their_line(tmp_path):
    items, errors = load_questions(_questions(tmp_path / "q.jsonl"))
    assert [q.id for q in items] == ["q1", "q2", "q4"]
    assert [(e.line, e.reason.split(" (")[0]) for e in errors] == [
        (3, "not UTF-8"), (4, "question 'q3' holds the escape \\ud800, half of a UTF-16 pair and no character: fix or "
                              "remove it in the file")]
    assert "byte 0xe9" in errors[0].reason and "save the file as UTF-8" in errors[0].reason


def test_finding16_dossier_run_lists_the_bad_questions_and_runs_the_rest(tmp_path, monkeypatch):
    from engine.agents import backend as backends
    from engine.cli.main import app

    class _Engine:
        def stats(self):
            return {"counters": {}, "cpu_threads": None}

    monkeypatch.setattr(backends, "engine_backend", lambda model, engine_kwargs, settings, env: (
        _Engine(), settings.resolved(False), backends.ScriptedBackend(search_then_answer)))
    corpus = build_corpus(tmp_path / "c")
    result = CliRunner().invoke(app, ["run", "--questions", str(_questions(tmp_path / "q.jsonl")), "--corpus",
                                      str(corpus), "--out", str(tmp_path / "run"), "--format", "json"])
    assert result.exit_code == 0, result.output
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 2 and ":3: not UTF-8" in skipped[0] and ":4: question 'q3'" in skipped[1]
    predictions = [json.loads(line)["id"] for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert sorted(predictions) == ["q1", "q2", "q4"]


def test_finding16_a_corrupt_corpus_database_is_one_line_naming_it(tmp_path):
    build_corpus(tmp_path / "c")
    (tmp_path / "c" / "dossier.sqlite").write_bytes(b"this is not a database" * 200)
    for name in ("dossier.sqlite-wal", "dossier.sqlite-shm"):
        (tmp_path / "c" / name).unlink(missing_ok=True)
    with pytest.raises(DossierError, match="dossier.sqlite is not a readable corpus database"):
        CorpusStore(tmp_path / "c")
    done = subprocess.run([sys.executable, "-m", "engine.cli.main", "corpus", "list", "--corpus", str(tmp_path / "c")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[0].startswith("error: ") and "rebuild it with `dossier ingest" in done.stderr
