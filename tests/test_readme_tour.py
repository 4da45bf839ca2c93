"""The README is a front page that stays true: at most 300 lines, no machine paths anywhere in the docs,
and its five-command tour runs as shown on the sample suite (numbers may differ, words may not)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:tmp|root|home|work|Users)/|\.\./shared|[A-Z]:\\\\Users")


def _docs() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_is_a_front_page_of_at_most_300_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


def test_no_machine_path_in_the_readme_the_docs_or_contributing():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}" for path in _docs()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if MACHINE_PATH.search(line)]
    assert not found, "machine paths (one machine's folders, or the shared folder) in the docs:\n" + "\n".join(found)


def tour() -> list[tuple[str, list[str]]]:
    """(command, the output lines the README shows for it) for each `$ ` line of the tour block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- tour -->", 1)[1].split("<!-- /tour -->", 1)[0]
    block = block.split("```", 2)[1].strip("\n")
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def _shape(line: str) -> str:
    """A line with its numbers blanked: timings and scores change from run to run, the words do not."""
    return re.sub(r"\d+(?:[.,]\d+)*", "N", " ".join(line.split()))


def test_the_tour_block_has_five_dossier_commands():
    commands = [command for command, _ in tour()]
    assert len(commands) == 5 and all(c.startswith("dossier ") for c in commands), commands


@pytest.mark.slow  # the embedded SmolLM2 (real weights): about a minute on a 2-core CPU
def test_the_readme_tour_runs_as_shown(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for command, shown in tour():
        argv = [sys.executable, "-m", "engine.cli.main", *shlex.split(command)[1:]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"$ {command}\n{done.stderr[-3000:]}"
        printed = {_shape(line) for line in (done.stdout + done.stderr).splitlines()}
        missing = [line for line in shown if line.strip() not in ("", "...") and _shape(line) not in printed]
        assert not missing, (f"$ {command} no longer prints:\n" + "\n".join(missing)
                             + "\n--- it printed:\n" + done.stdout)
