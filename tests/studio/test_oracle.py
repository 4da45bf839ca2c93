"""Issue 27 item 5: `dossier studio --oracle`, MADQA's human oracle condition (gold pages shown first),
recorded in run.json and every trajectory and reported apart by `dossier eval` and `eval compare`;
and issue 26's leftover: a resume code brings an annotator back in a browser without the cookie."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from engine.datasets.formats import write_jsonl
from engine.studio import StudioConfig, serve_in_thread

from .conftest import QUESTIONS, request

# q1 and q3 have gold pages in the corpus; q5 has no gold evidence; q6 names a page that is not in it
ORACLE_QUESTIONS = [QUESTIONS[0], QUESTIONS[2],
                    {"id": "q5", "question": "Who signed the letter to members?", "answer_variants": [["the board"]]},
                    {"id": "q6", "question": "What is on page 9?", "answer_variants": [["nothing"]],
                     "evidence": [{"document": "annual-2023", "page": 9}, {"document": "gone", "page": 1}]}]


@pytest.fixture(scope="module")
def oracle_questions(tmp_path_factory):
    path = tmp_path_factory.mktemp("oracle-q") / "questions.jsonl"
    write_jsonl(path, ORACLE_QUESTIONS)
    return path


def _post(live, path, body, headers=None):
    return request(live.url, "POST", path, body, headers=headers)


def _answer(live, slug, qid, answer, mark=None):
    if mark:
        assert _post(live, f"/api/annotators/{slug}/mark", {"question_id": qid, **mark, "marked": True}).status == 200
    reply = _post(live, f"/api/annotators/{slug}/submit", {"question_id": qid, "action": "answer", "answer": [answer]})
    assert reply.status == 200, reply.body
    return reply.json


def test_oracle_shows_gold_pages_lists_questions_without_them_and_records_the_condition(studio_files, oracle_questions,
                                                                                         tmp_path):
    config = StudioConfig(studio_files.corpus, oracle_questions, tmp_path / "runs", port=0, oracle=True)
    with serve_in_thread(config) as live:
        problems = live.studio.oracle_problems
        assert [line.split(":")[0] for line in problems] == ["q5", "q6"], problems
        assert "no gold evidence" in problems[0] and "shown without pages" in problems[0]
        assert "annual-2023 p. 9, gone p. 1" in problems[1] and "shown without pages" in problems[1]
        state = _post(live, "/api/signin", {"name": "Olga"}).json
        assert state["condition"] == "oracle" and state["question"]["id"] == "q1"
        assert state["oracle"] == {"pages": [{"document": "annual-2023", "page": 2, "page_count": 3}], "note": None}
        # the page the oracle panel shows is served like any page the viewer shows
        image = request(live.url, "GET", "/pages/annual-2023/2.png")
        assert image.status == 200 and image.body[:4] == b"\x89PNG"
        view = {"question_id": "q1", "document": "annual-2023", "page": 2, "via": "oracle"}
        assert _post(live, "/api/annotators/olga/view", view).status == 200
        state = _answer(live, "olga", "q1", "$48,250", {"document": "annual-2023", "page": 2})
        state = _answer(live, "olga", "q3", "retail")  # wrong: the oracle does not answer for the person
        assert state["question"]["id"] == "q5"
        assert state["oracle"]["pages"] == [] and "no gold evidence" in state["oracle"]["note"]
        _answer(live, "olga", "q5", "the board")
        state = request(live.url, "GET", "/api/annotators/olga/state").json
        assert state["oracle"]["pages"] == [] and "2 gold page(s)" in state["oracle"]["note"]
        _answer(live, "olga", "q6", "something")
    run_dir = tmp_path / "runs" / "olga"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["condition"] == "oracle" and run["settings"]["condition"] == "oracle"
    trajectories = {t["id"]: t for t in map(json.loads, (run_dir / "trajectories.jsonl").read_text().splitlines())}
    assert {t["condition"] for t in trajectories.values()} == {"oracle"}
    assert trajectories["q1"]["oracle_pages"] == [{"document": "annual-2023", "page": 2}]
    assert trajectories["q5"]["oracle_pages"] == [] and trajectories["q6"]["oracle_pages"] == []
    assert trajectories["q1"]["steps"][0]["via"] == "oracle"
    predictions = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert {p["condition"] for p in predictions} == {"oracle"}

    # a search-condition studio on the same --out refuses the oracle run instead of mixing them
    from tools.errors import DossierError

    with serve_in_thread(StudioConfig(studio_files.corpus, oracle_questions, tmp_path / "runs", port=0)) as plain:
        with pytest.raises(DossierError, match="different settings"):
            plain.studio.sign_in("Olga")

    # dossier eval reports it apart, and eval compare against a search-condition run says so
    from engine.cli.main import app

    result = CliRunner().invoke(app, ["eval", str(run_dir), "--no-drift", "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    headline = next(i for i, line in enumerate(lines) if line.startswith("condition"))
    assert "oracle condition: gold pages shown" in lines[headline]
    assert lines[headline + 1].startswith("accuracy")  # above the accuracy, not lost below it
    assert "oracle condition: gold pages shown" in (run_dir / "eval" / "report.md").read_text()
    assert "oracle condition: gold pages shown" in (run_dir / "eval" / "report.html").read_text()
    assert json.loads((run_dir / "eval" / "report.json").read_text())["behaviour"]["condition"] == "oracle"

    search_out = tmp_path / "search-runs"
    with serve_in_thread(StudioConfig(studio_files.corpus, oracle_questions, search_out, port=0)) as plain:
        state = _post(plain, "/api/signin", {"name": "Sam"}).json
        assert state["condition"] == "search" and "oracle" not in state
        for qid in ("q1", "q3", "q5", "q6"):
            _answer(plain, "sam", qid, "?")
    plain_eval = CliRunner().invoke(app, ["eval", str(search_out / "sam"), "--no-drift", "--bootstrap", "0"])
    assert plain_eval.exit_code == 0 and "oracle condition" not in plain_eval.output
    compared = CliRunner().invoke(app, ["eval", "compare", str(run_dir), str(search_out / "sam")])
    assert compared.exit_code == 0, compared.output
    assert "A olga: oracle condition: gold pages shown" in compared.output
    assert "B sam: oracle" not in compared.output


@pytest.fixture(scope="module")
def studio(studio_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("resume-runs")
    with serve_in_thread(StudioConfig(studio_files.corpus, studio_files.questions, out, port=0)) as server:
        yield server


def _sign_in(studio, body, cookie=""):
    reply = request(studio.url, "POST", "/api/signin", body, headers={"Cookie": cookie})
    return reply, reply.headers.get("set-cookie", "").split(";")[0]


def test_issue26_a_resume_code_rebinds_a_new_browser_and_keeps_the_earlier_answers(studio):
    announced: list[str] = []
    studio.studio.announce = announced.append
    first, cookie = _sign_in(studio, {"name": "Rita"})
    code = first.json["resume_code"]
    assert first.status == 200 and len(code) == 14 and code.count("-") == 2
    assert announced and code in announced[-1] and "'Rita'" in announced[-1]  # printed for the operator
    reply = request(studio.url, "POST", "/api/annotators/rita/submit",
                    {"question_id": "q1", "action": "answer", "answer": ["$48,250"]}, headers={"Cookie": cookie})
    assert reply.status == 200 and reply.json["progress"]["done"] == 1
    again, _ = _sign_in(studio, {"name": "Rita"}, cookie)  # the same browser: no code needed, none shown again
    assert again.status == 200 and "resume_code" not in again.json

    # another browser (no cookie): refused, and told what to do
    refused, _ = _sign_in(studio, {"name": "rita"})
    assert refused.status == 409 and "resume code" in refused.json["error"]
    # ... with the code (any case, spaces for dashes) it is Rita's run again, at q2
    back, new_cookie = _sign_in(studio, {"name": "RITA", "resume_code": code.lower().replace("-", " ")})
    assert back.status == 200, back.body
    assert back.json["question"]["id"] == "q2" and back.json["progress"]["done"] == 1 and "resume_code" not in back.json
    assert new_cookie.startswith("dossier_annotator_") and new_cookie != ""
    state = request(studio.url, "GET", "/api/annotators/rita/state", headers={"Cookie": new_cookie})
    assert state.status == 200 and state.json["annotator"] == "Rita"
    reply = request(studio.url, "POST", "/api/annotators/rita/submit",
                    {"question_id": "q2", "action": "skip"}, headers={"Cookie": new_cookie})
    assert reply.status == 200 and reply.json["progress"]["done"] == 2
    lines = (studio.studio.config.out / "rita" / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["q1", "q2"]  # the earlier line kept, the new one added
    assert json.loads(lines[0])["final"]["answer"] == ["$48,250"]


def test_issue26_a_wrong_resume_code_is_403_with_a_message(studio):
    first, _ = _sign_in(studio, {"name": "Walt"})
    other, _ = _sign_in(studio, {"name": "Wendy"})
    for wrong in ("AAAA-BBBB-CCCC", other.json["resume_code"], "x"):  # another annotator's code opens nothing
        reply, cookie = _sign_in(studio, {"name": "Walt", "resume_code": wrong})
        assert reply.status == 403 and "wrong resume code for 'Walt'" in reply.json["error"], reply.body
        assert "pick another name" in reply.json["error"] and cookie == ""
    assert request(studio.url, "GET", "/api/annotators/walt/state", headers={"Cookie": ""}).status == 403
