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


def _madqa_analyses_run():
    """Closed-book-labelled predictions with tokens and time, and trajectories with several searches."""
    from engine.datasets.formats import Prediction, Question

    gold, predictions, episodes = [], [], []
    for i in range(8):
        qid = f"q{i}"
        question, answer = (("Is the office open on Sundays?", "Yes") if i % 4 == 0 else
                            ("Is the fee $10 or $12?", "$12") if i % 4 == 1 else
                            (f"What is the code of form {i}?", f"code {i}"))
        gold.append(Question.from_json({"id": qid, "question": question, "answer_variants": [[answer]],
                                        "evidence": [{"document": f"d{i}", "page": 1}]}, "gold"))
        right = i % 3 != 2
        searches = 1 + i % 3
        predictions.append(Prediction.from_json({
            "id": qid, "question": question, "answer": [answer if right else "nope"], "agent": "closed-book",
            "citations": [{"document": f"d{i}", "page": 1}], "search_history": ["q"] * searches,
            "tokens": {"prefilled": 100 + 7 * i, "cached": 20 * (i % 2), "generated": 10 + 3 * i},
            "wall_s": 1.5 + (i * 37 % 11)}, "pred"))
        hit_at = i % 4  # 0: never, else the search that returns the gold page
        steps = [{"tool_call": {"name": "search", "arguments": {"query": "q"}},
                  "tool_result": {"pages": [{"document": f"d{i}" if s + 1 == hit_at else "other", "page": 1}]}}
                 for s in range(searches)]
        steps.append({"tool_call": {"name": "answer", "arguments": {"answer": [answer]}}, "tool_result": None})
        episodes.append(parse_episode({"id": qid, "question": question, "steps": steps}, "t"))
    return gold, predictions, episodes


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_madqa_analyses_plots_render_in_headless_chromium(tmp_path):
    from engine.eval.reports.html import CLOSED_BOOK_PLOT_IDS

    result = evaluate(*_madqa_analyses_run(), EvalConfig(bootstrap=0))
    assert result.report["guessability"] is not None and result.report["steps"]["recovery"]["needing_recovery"]
    files = write_reports(tmp_path / "out", result.report, result.items)
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
               (tmp_path / "out" / "report.html").as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    assert "<h1>Dossier evaluation</h1>" in dom, dom[:500]
    for plot_id in ("plot-retrieval-curve", "plot-recovery", *CLOSED_BOOK_PLOT_IDS):
        start = dom.index(f'id="{plot_id}"')
        svg = dom[start:dom.index("</svg>", start)]
        assert "<polyline" in svg or "<rect" in svg, plot_id
    curve = dom[dom.index('id="plot-retrieval-curve"'):]
    curve = curve[:curve.index("</svg>")]
    assert curve.count('class="series"') == 2 and 'data-series="gold page"' in curve  # Fig. 22: document and page
    recovery = dom[dom.index('id="plot-recovery"'):]
    assert recovery[:recovery.index("</svg>")].count('class="ci"') >= 2  # Fig. 23 bars carry Wilson whiskers
    assert "Kuiper by effort measure" in dom and "generated tokens" in dom and "Spearman" in dom
    guess = dom[dom.index('id="plot-guessability"'):]
    assert guess[:guess.index("</svg>")].count('class="bar"') == 3  # yes/no, binary choice, memorisation
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}",
                    "--window-size=1000,4000", files["html"]], capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 40_000  # a long page of plots, not a blank image


def test_a_report_written_before_the_madqa_analyses_still_renders():
    from engine.eval.reports.html import render_html
    from engine.eval.reports.markdown import render_markdown

    report = evaluate(GOLD, PREDICTIONS, config=EvalConfig(bootstrap=0)).report
    for key in ("effort_measures", "guessability"):
        report.pop(key)
    report["taxonomy"]["counts"].pop("correct_verbose")
    html = render_html(report)
    assert 'id="plot-retrieval-curve"' in html and "Kuiper by effort measure" not in html
    assert "verbose" not in render_markdown(report)
