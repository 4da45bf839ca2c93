"""The CLI's counted progress (engine/cli/options.py StepProgress) goes through tools/progress.py: in a log
(stderr not a terminal) it prints plain lines with counts, a rate and the loss; `dossier index` does too."""

import io
import time

from typer.testing import CliRunner

from engine.cli.main import app
from engine.cli.options import StepProgress


def _wait_for(stream: io.StringIO, prefix: str, contains: str = "") -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in stream.getvalue().splitlines():
            if line.startswith(prefix) and contains in line:
                return line
        time.sleep(0.01)
    raise AssertionError(f"no line {prefix!r} holding {contains!r}:\n{stream.getvalue()}")


def test_step_progress_in_a_log_prints_counts_rate_and_loss():
    stream = io.StringIO()
    with StepProgress("train queries", phase_units={"train": "steps"}, every_s=0.05, stream=stream,
                      terminal=False) as progress:
        progress("train", 0, 8)
        time.sleep(0.02)
        progress("train", 4, 8, {"loss": 1.23456})
        line = _wait_for(stream, "train queries: train 4/8, ", "loss 1.2346")
        assert " steps/s, loss 1.2346, elapsed " in line
        progress("heldout base", 3, 10)  # a new phase: its own count and unit
        line = _wait_for(stream, "train queries: heldout base 3/10, ")
        assert " q/s, elapsed " in line and "loss" not in line
    written = stream.getvalue()
    time.sleep(0.12)
    assert stream.getvalue() == written, "plain lines kept coming after the block ended"


def test_dossier_index_in_a_log_prints_plain_progress_lines(tmp_path):
    runner = CliRunner()
    assert runner.invoke(app, ["sample", "--out", str(tmp_path / "s")]).exit_code == 0
    ingested = runner.invoke(app, ["ingest", str(tmp_path / "s" / "pdfs"), "--corpus", str(tmp_path / "c"),
                                   "--ocr", "none"])
    assert ingested.exit_code == 0, ingested.output
    result = runner.invoke(app, ["index", "--corpus", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert any(line.startswith("index: pages") for line in result.stderr.splitlines()), result.stderr
    assert "indexed 14 pages" in result.stdout
