"""`dossier studio` as a user starts it: a real process that prints its URL and serves it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from engine.cli.main import app
from tools.errors import DossierError

ROOT = Path(__file__).resolve().parents[2]


def test_help_has_an_example_and_other_hosts_need_a_token(studio_files, tmp_path):
    runner = CliRunner()
    assert "Example:" in runner.invoke(app, ["studio", "--help"]).output
    result = runner.invoke(app, ["studio", "--corpus", str(studio_files.corpus), "--questions",
                                 str(studio_files.questions), "--out", str(tmp_path), "--host", "0.0.0.0"])
    assert isinstance(result.exception, DossierError) and "--token" in str(result.exception)
    result = runner.invoke(app, ["studio", "--corpus", str(tmp_path), "--questions", str(studio_files.questions),
                                 "--out", str(tmp_path)])
    assert isinstance(result.exception, DossierError) and "is not a corpus" in str(result.exception)


def test_the_command_prints_its_url_and_serves_the_app(studio_files, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "engine.cli.main", "studio", "--corpus", str(studio_files.corpus),
               "--questions", str(studio_files.questions), "--out", str(tmp_path / "runs"), "--port", "0"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # blocks until the server is listening
        assert line.startswith("Dossier studio: http://127.0.0.1:"), (line, process.stderr.read() if process.poll() else "")
        url = line.split()[2]
        assert "3 documents, 6 pages · 4 questions · search: top 5, boolean query language" in process.stdout.readline()
        with urllib.request.urlopen(url + "api/info", timeout=30) as response:
            assert json.load(response)["questions"] == 4
        with urllib.request.urlopen(url, timeout=30) as response:
            assert b"<title>Dossier studio</title>" in response.read()
    finally:
        _stop(process)


def test_oracle_lists_questions_without_gold_pages_at_start_and_serves_them(studio_files, tmp_path):
    from engine.datasets.formats import write_jsonl

    from .conftest import QUESTIONS

    questions = tmp_path / "questions.jsonl"
    write_jsonl(questions, [QUESTIONS[0], {"id": "q5", "question": "Who signed the letter?", "answer_variants": [["x"]]}])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "engine.cli.main", "studio", "--corpus", str(studio_files.corpus),
               "--questions", str(questions), "--out", str(tmp_path / "runs"), "--port", "0", "--oracle"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("Dossier studio: http://127.0.0.1:"), (line, process.stderr.read() if process.poll() else "")
        assert "· oracle condition: gold pages shown first" in process.stdout.readline()
        assert process.stdout.readline().startswith("each annotator's run:")
        err = [process.stderr.readline() for _ in range(3)]
        assert err[1].strip() == "oracle condition: 1 of 2 questions show fewer than their gold pages:", err
        assert err[2].strip() == "q5: no gold evidence in the question file; shown without pages", err
        url = line.split()[2]
        request = urllib.request.Request(url + "api/signin", data=json.dumps({"name": "Ann"}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            state = json.load(response)
        assert state["oracle"]["pages"] == [{"document": "annual-2023", "page": 2, "page_count": 3}]
        printed = process.stdout.readline()  # the new annotator's resume code, for the operator
        assert printed.startswith("new annotator 'Ann'") and printed.strip().endswith(state["resume_code"]), printed
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """Terminate the studio, kill it if it has not exited within 20 s, and reap it."""
    process.terminate()
    deadline = time.monotonic() + 20
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if process.poll() is None:
        process.kill()
    process.wait()
