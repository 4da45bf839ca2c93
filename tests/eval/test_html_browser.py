"""The HTML report renders in a headless Chromium (Debian's `chromium`) with its plots present.

Skips when no chromium binary is installed (`.ci/run` installs it with apt when it can).
"""

import shutil
import subprocess

import pytest

from engine.eval.evaluate import EvalConfig, evaluate
from engine.eval.reports.files import write_reports
from engine.eval.reports.html import PLOT_IDS
from engine.eval.trajectories import parse_episode

from .test_evaluate import GOLD, PREDICTIONS

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_report_renders_with_plots_in_headless_chromium(tmp_path):
    episode = parse_episode({"id": "q1", "steps": [
        {"tool_call": {"name": "search", "arguments": {"query": "alpha"}},
         "tool_result": {"pages": [{"document": "a", "page": 1}]}},
        {"tool_call": {"name": "answer", "arguments": {"answer": ["Alpha"]}}, "tool_result": None}]}, "t")
    result = evaluate(GOLD, PREDICTIONS, [episode], EvalConfig(bootstrap=100))
    files = write_reports(tmp_path / "out", result.report, result.items)
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
               (tmp_path / "out" / "report.html").as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    assert "<h1>Dossier evaluation</h1>" in dom, dom[:500]  # the browser parsed and serialised the page
    for plot_id in PLOT_IDS:
        start = dom.index(f'id="{plot_id}"')
        svg = dom[start:dom.index("</svg>", start)]
        assert "<polyline" in svg or "<rect" in svg, plot_id  # each plot has drawn marks
    assert dom.count('class="series"') >= 2 and dom.count('class="bar"') >= 4
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}",
                    "--window-size=1000,1800", files["html"]], capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000  # a page with plots, not a blank image
