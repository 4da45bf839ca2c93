"""Ctrl-C in a long, resumable command says how to resume and exits 130 (engine/cli/main.py RESUMABLE).

typer turns a KeyboardInterrupt into a silent exit 130 inside `app()`, so a handler around `app()` never
printed the hint; each resumable command now prints it itself. The work of each command is made to
raise KeyboardInterrupt (as Ctrl-C would mid-way), and one test sends a real SIGINT to `dossier ingest`.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.cli.main import RESUMABLE, app
from engine.cli.options import RESUME_HINT

ROOT = Path(__file__).resolve().parents[1]


def _interrupt(*_args, **_kwargs):
    raise KeyboardInterrupt


def _files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "pdfs").mkdir()
    (tmp_path / "corpus").mkdir()
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "What?", "answers": ["x"]}\n')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "predictions.jsonl").write_text("")
    return {name: str(tmp_path / name) for name in ("pdfs", "corpus", "q.jsonl", "run")}


# (command as RESUMABLE names it, its arguments, the function its work goes through)
CASES = [
    ("ingest", lambda f: ["ingest", f["pdfs"], "--corpus", f["corpus"]], "engine.cli.corpus._ingest_with_progress"),
    ("run", lambda f: ["run", "--agent", "bm25", "--questions", f["q.jsonl"], "--corpus", f["corpus"], "--out",
                       f["run"]], "engine.agents.launch.start_run"),
    ("index", lambda f: ["index", "--corpus", f["corpus"]], "tools.corpus.CorpusStore"),
    ("trajectories mine", lambda f: ["trajectories", "mine", "--corpus", f["corpus"], "--questions", f["q.jsonl"],
                                     "--out", f["run"]], "engine.datasets.load_questions"),
    ("eval score", lambda f: ["eval", "score", f["run"]], "engine.eval.inputs.load_inputs"),
]


def test_every_resumable_command_is_tested():
    assert sorted(name for name, _, _ in CASES) == sorted(RESUMABLE)


@pytest.mark.parametrize("name,argv,work", CASES, ids=[c[0] for c in CASES])
def test_ctrl_c_in_a_resumable_command_prints_how_to_resume(tmp_path, monkeypatch, name, argv, work):
    monkeypatch.setattr(work, _interrupt)
    result = CliRunner().invoke(app, argv(_files(tmp_path)))
    assert result.exit_code == 130, result.output
    assert RESUME_HINT in result.output


def test_ctrl_c_in_a_command_that_cannot_resume_says_nothing_of_resuming(tmp_path, monkeypatch):
    monkeypatch.setattr("engine.cli.search._ranker", _interrupt)
    result = CliRunner().invoke(app, ["search", "--corpus", _files(tmp_path)["corpus"], "revenue"])
    assert result.exit_code == 130
    assert "resume" not in result.output


DRIVER = """
import sys, time
import engine.cli.corpus
def slow(*args, **kwargs):
    print("working", flush=True)
    time.sleep(60)
engine.cli.corpus._ingest_with_progress = slow
from engine.cli.main import main
sys.argv = ["dossier", "ingest", sys.argv[1], "--corpus", sys.argv[2]]
main()
"""


def _default_sigint() -> None:
    """The child starts as a shell would start it: SIGINT at its default disposition, whatever this process has
    (an ignored SIGINT is inherited across exec, and Python then installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_real_sigint_to_dossier_ingest_prints_the_hint(tmp_path):
    files = _files(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", DRIVER, files["pdfs"], files["corpus"]], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ | {"PYTHONPATH": str(ROOT)},
                             preexec_fn=_default_sigint)
    try:
        assert child.stdout.readline().strip() == "working", child.stderr.read()
        time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert RESUME_HINT in err
