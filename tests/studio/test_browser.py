"""The studio end to end in a real browser: Playwright driving Debian's Chromium.

Skips when Chromium or Playwright is missing (`.ci/run` installs the chromium apt package; never
`playwright install`, which downloads). Set DOSSIER_STUDIO_SCREENSHOTS=docs/studio to refresh
the README's screenshots; otherwise they go to the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.studio import StudioConfig, serve_in_thread

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)


def _image_loaded(page) -> None:
    page.wait_for_function("() => { const i = document.getElementById('page-image');"
                           " return !i.hidden && i.complete && i.naturalWidth > 0; }")


def _results(page) -> list[str]:
    page.wait_for_selector("#results li")
    return [t.split("\n")[0].strip() for t in page.locator("#results li .where").all_inner_texts()]


def _shoot(page, folder: Path, name: str) -> None:
    """A screenshot, stored as a palette PNG (a few dozen KB, fit for the repository)."""
    from PIL import Image

    path = folder / name
    page.screenshot(path=path)
    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=128).save(path, optimize=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_a_person_answers_questions_in_a_real_browser(studio_files, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright==1.65.2 (dev extra)")
    from engine.cli.main import app

    out = tmp_path / "runs"
    shots = Path(os.environ.get("DOSSIER_STUDIO_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    config = StudioConfig(studio_files.corpus, studio_files.questions, out, port=0)
    with serve_in_thread(config) as live, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(20_000)
        page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
        page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
        page.goto(live.url)

        # sign in
        page.wait_for_selector("#signin-screen:not([hidden])")
        assert not page.is_visible("#work-screen") and not page.is_visible("#progress")
        assert "4 questions over 3 documents" in page.inner_text("#corpus-info")
        _shoot(page, shots, "signin.png")
        page.fill("#name", "Ana Tester")
        page.press("#name", "Enter")
        page.wait_for_selector("#work-screen:not([hidden])")
        assert "revenue in 2023" in page.inner_text("#question-text")
        assert page.inner_text("#progress-text") == "0 of 4 done"

        # q1: a phrase search (focused with "/"), then a Boolean query; open, page on, mark, answer
        page.click("body")
        page.keyboard.press("/")
        page.keyboard.type('"net income" 2023')
        page.keyboard.press("Enter")
        assert _results(page)[0] == "1.annual-2023 · page 2"
        assert page.locator("#results li").first.locator("mark").count() >= 3  # the query words, highlighted
        page.fill("#query", "revenue NOT 2022")
        page.press("#query", "Enter")
        page.wait_for_function("() => document.getElementById('search-status').textContent.includes('NOT 2022')")
        assert _results(page) == ["1.annual-2023 · page 2"]
        page.click("#help summary")  # the query language is documented on the page
        assert '"net income"' in page.inner_text("#query-help")
        page.click("#help summary")
        page.click("body")
        page.keyboard.press("j")  # open the first result
        _image_loaded(page)
        assert page.inner_text("#page-number") == "page 2 / 3"
        page.keyboard.press("ArrowRight")  # the next page of the same document
        page.wait_for_function("() => document.getElementById('page-number').textContent === 'page 3 / 3'")
        _image_loaded(page)
        assert page.is_disabled("#next-page")
        page.click("#prev-page")
        page.wait_for_function("() => document.getElementById('page-number').textContent === 'page 2 / 3'")
        page.keyboard.press("+")
        assert page.inner_text("#zoom-label") == "125%"
        page.keyboard.press("-")
        page.keyboard.press("m")  # mark as evidence
        page.wait_for_selector("#evidence li >> text=annual-2023 · p. 2")
        assert "Marked" in page.inner_text("#mark")
        page.fill(".answer-value", "$48,250")
        _image_loaded(page)
        _shoot(page, shots, "question.png")
        page.keyboard.press("Control+Enter")
        page.wait_for_function("() => document.getElementById('progress-text').textContent === '1 of 4 done'")

        # q2: skipped
        assert "capital expenditure in 2022" in page.inner_text("#question-text")
        page.click("#skip")
        page.wait_for_function("() => document.getElementById('progress-text').textContent === '2 of 4 done'")

        # q3: search, open by click, mark; a refresh mid-question brings everything back
        page.fill("#query", "outlook OR growth")
        page.press("#query", "Enter")
        _results(page)
        page.click("#results li button >> nth=0")
        _image_loaded(page)
        page.click("#mark")
        page.wait_for_selector("#evidence li >> text=annual-2023 · p. 3")
        page.reload()
        page.wait_for_selector("#work-screen:not([hidden])")
        assert "segment" in page.inner_text("#question-text")
        assert page.input_value("#query") == "outlook OR growth"
        assert _results(page)[0].startswith("1.annual-2023 · page 3")
        assert page.inner_text("#evidence").startswith("annual-2023 · p. 3")
        assert page.inner_text("#page-number") == "page 3 / 3"
        page.fill(".answer-value", "wholesale")
        page.click("#add-value")
        page.locator(".answer-value").nth(1).fill("growth")
        page.click("#submit-answer")
        page.wait_for_function("() => document.getElementById('progress-text').textContent === '3 of 4 done'")

        # q4: a PDF whose text is HTML with script shows as text and runs nothing; then "I can't find it"
        page.fill("#query", "script")
        page.press("#query", "Enter")
        assert _results(page)[0].startswith("1.memo · page 1")
        snippet = page.inner_text("#results li .snippet")
        assert "script>window.__pwned = 1</script>" in snippet and 'onerror="window.__pwned = 2"' in snippet
        assert page.locator("#results script, #results img").count() == 0
        page.click("#results li button >> nth=0")
        _image_loaded(page)
        assert page.evaluate("() => window.__pwned") is None
        page.click("#not-found")
        page.wait_for_selector("#done-screen:not([hidden])")
        assert page.inner_text("#progress-text") == "4 of 4 done"
        _shoot(page, shots, "done.png")
        browser.close()
    assert not problems, problems

    # the run is scored by `dossier eval` like an agent's
    run_dir = out / "ana-tester"
    result = CliRunner().invoke(app, ["eval", str(run_dir), "--no-drift", "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    assert "4 gold items, 4 predictions" in result.output
    assert "accuracy (ANLS* ≥ 0.5)" in result.output and "50.0%" in result.output  # q1 and q3 right
    assert "ended: answered 2, not found 1, skipped 1" in result.output
    report = json.loads((run_dir / "eval" / "report.json").read_text())
    assert report["steps"]["first_query"]["page_hits"] == 2  # q1's and q3's first searches held a gold page
    run = json.loads((run_dir / "run.json").read_text())
    assert run["agent"] == "human" and run["annotator"] == "Ana Tester" and run["settings"]["k"] == 5

    # the trajectory holds every action, timestamped
    trajectories = {t["id"]: t for t in map(json.loads, (run_dir / "trajectories.jsonl").read_text().splitlines())}
    q1 = trajectories["q1"]["steps"]
    assert [s["tool_call"]["name"] for s in q1] == ["search", "search", "view_page", "view_page", "view_page",
                                                    "mark_evidence", "answer"]
    assert [s.get("via") for s in q1 if s["tool_call"]["name"] == "view_page"] == ["result", "next", "previous"]
    assert all(s["time"].endswith("Z") and s["elapsed_s"] >= 0 for t in trajectories.values() for s in t["steps"])
    assert all(s["tool_result"]["dwell_s"] > 0 for s in q1 if s["tool_call"]["name"] == "view_page")
    assert q1[-1]["tool_call"]["arguments"] == {"answer": ["$48,250"], "citations": [{"document": "annual-2023", "page": 2}]}
    assert trajectories["q2"]["final"]["reason"] == "skipped"
    assert len(trajectories["q3"]["opened"]) == 2  # shown, then shown again after the refresh
    assert trajectories["q3"]["final"]["answer"] == ["wholesale", "growth"]
    assert trajectories["q4"]["steps"][-1]["tool_call"]["name"] == "give_up"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_the_oracle_condition_and_a_resume_code_in_a_real_browser(studio_files, tmp_path):
    """`--oracle`: the gold page is on screen before any search; the answer's trajectory records the
    condition. Then the same annotator comes back in a fresh browser with the resume code."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright==1.65.2 (dev extra)")
    from engine.datasets.formats import write_jsonl

    from .conftest import QUESTIONS

    questions = tmp_path / "questions.jsonl"
    write_jsonl(questions, [QUESTIONS[0], {"id": "q5", "question": "Who signed the letter to members?",
                                           "answer_variants": [["the board"]]}])  # q5: no gold evidence
    out = tmp_path / "runs"
    shots = Path(os.environ.get("DOSSIER_STUDIO_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    config = StudioConfig(studio_files.corpus, questions, out, port=0, oracle=True)
    with serve_in_thread(config) as live, sync_api.sync_playwright() as playwright:
        assert [p.split(":")[0] for p in live.studio.oracle_problems] == ["q5"]
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(20_000)
        page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
        page.goto(live.url)
        page.wait_for_selector("#signin-screen:not([hidden])")
        assert not page.is_visible("#resume-code")  # only asked for when the name already has a run
        page.fill("#name", "Oscar Oracle")
        page.press("#name", "Enter")
        page.wait_for_selector("#work-screen:not([hidden])")

        # the gold page is listed and open in the viewer before any search
        assert page.is_visible("#oracle") and page.inner_text("#oracle-pages") == "annual-2023 · p. 2"
        _image_loaded(page)
        assert page.inner_text("#page-label") == "annual-2023" and page.inner_text("#page-number") == "page 2 / 3"
        assert page.get_attribute("#page-image", "src").endswith("pages/annual-2023/2.png")
        assert page.locator("#results li").count() == 0 and page.inner_text("#search-status") == ""
        assert page.is_visible("#search-form")  # the search stays available beside the gold pages
        code = page.inner_text("#resume-value")  # shown once, at the sign-in that started the run
        assert page.is_visible("#resume-banner") and len(code) == 14
        _shoot(page, shots, "oracle.png")
        page.click("#resume-ok")
        assert not page.is_visible("#resume-banner")
        page.click("#mark")
        page.wait_for_selector("#evidence li >> text=annual-2023 · p. 2")
        page.fill(".answer-value", "$48,250")
        page.click("#submit-answer")
        page.wait_for_function("() => document.getElementById('progress-text').textContent === '1 of 2 done'")

        # q5 has no gold evidence: shown without pages, and the page says so
        assert "letter to members" in page.inner_text("#question-text")
        assert page.inner_text("#oracle-pages") == "No gold page for this question."
        assert "no gold evidence" in page.inner_text("#oracle-note")
        assert not page.is_visible("#page-image")
        page.click("#skip")
        page.wait_for_selector("#done-screen:not([hidden])")

        # a fresh browser (no cookie): refused without the code, 403 with a wrong one, back in with it
        other = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
        other.set_default_timeout(20_000)
        other.on("pageerror", lambda err: problems.append(f"page error: {err}"))
        other.goto(live.url)
        other.wait_for_selector("#signin-screen:not([hidden])")
        other.fill("#name", "oscar oracle")
        other.press("#name", "Enter")
        other.wait_for_function("() => document.getElementById('signin-error').textContent.includes('resume code')")
        assert other.is_visible("#resume-code")
        other.fill("#resume-code", "AAAA-BBBB-CCCC")
        other.press("#resume-code", "Enter")
        other.wait_for_function("() => document.getElementById('signin-error').textContent.includes('wrong resume code')")
        assert other.is_visible("#signin-screen")
        other.fill("#resume-code", code)
        other.press("#resume-code", "Enter")
        other.wait_for_selector("#done-screen:not([hidden])")
        assert other.inner_text("#progress-text") == "2 of 2 done"
        browser.close()
    assert not problems, problems

    run_dir = out / "oscar-oracle"
    assert json.loads((run_dir / "run.json").read_text())["condition"] == "oracle"
    trajectories = {t["id"]: t for t in map(json.loads, (run_dir / "trajectories.jsonl").read_text().splitlines())}
    q1 = trajectories["q1"]
    assert q1["condition"] == "oracle" and q1["oracle_pages"] == [{"document": "annual-2023", "page": 2}]
    assert [s["tool_call"]["name"] for s in q1["steps"]] == ["view_page", "mark_evidence", "answer"]  # no search
    assert q1["steps"][0]["via"] == "oracle" and q1["final"]["answer"] == ["$48,250"]
    assert trajectories["q5"]["condition"] == "oracle" and trajectories["q5"]["oracle_pages"] == []
