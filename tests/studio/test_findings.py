"""Issue 26 items 13 and 11 in the studio: a session is bound to one annotator, and a lone surrogate
is a 400 with a message, not a 500."""

from __future__ import annotations

import pytest

from engine.studio import StudioConfig, serve_in_thread

from .conftest import request


@pytest.fixture(scope="module")
def studio(studio_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("findings-runs")
    with serve_in_thread(StudioConfig(studio_files.corpus, studio_files.questions, out, port=0)) as server:
        yield server


def sign_in(studio, name: str, cookie: str | None = None):
    headers = {"Cookie": cookie} if cookie else {"Cookie": ""}
    reply = request(studio.url, "POST", "/api/signin", {"name": name}, headers=headers)
    return reply, reply.headers.get("set-cookie", "").split(";")[0]


def test_finding13_a_session_acts_only_as_its_own_annotator(studio):
    ana, ana_cookie = sign_in(studio, "Ana")
    assert ana.status == 200 and ana_cookie.startswith("dossier_annotator_")
    ben, ben_cookie = sign_in(studio, "Ben")
    assert ben.status == 200
    qid = ana.json["question"]["id"]
    as_ben = {"Cookie": ben_cookie}
    for method, path, body in [("GET", "/api/annotators/ana/state", None),
                               ("POST", "/api/annotators/ana/search", {"question_id": qid, "query": "revenue"}),
                               ("POST", "/api/annotators/ana/submit", {"question_id": qid, "action": "skip"})]:
        for headers in (as_ben, {"Cookie": ""}, {"Cookie": f"dossier_annotator_{b'ana'.hex()}=forged"}):
            reply = request(studio.url, method, path, body, headers=headers)
            assert reply.status == 403 and "ana" in reply.json["error"].lower(), (path, headers, reply.body)
    assert request(studio.url, "GET", "/api/annotators/ana/state", headers={"Cookie": ana_cookie}).status == 200
    progress = request(studio.url, "GET", "/api/annotators/ana/state", headers={"Cookie": ana_cookie}).json["progress"]
    assert progress["done"] == 0  # Ben's skip did not land in Ana's run


def test_finding13_a_name_in_another_case_does_not_open_someone_elses_run(studio):
    first, cookie = sign_in(studio, "Cleo")
    assert first.status == 200
    for other in ("CLEO", "cleo", " Cleo "):
        reply, _ = sign_in(studio, other)
        assert reply.status == 409 and "already" in reply.json["error"], reply.body
    again, _ = sign_in(studio, "CLEO", cookie)  # the same browser comes back under any case
    assert again.status == 200 and again.json["slug"] == "cleo"


def test_finding11_a_lone_surrogate_is_a_400_not_a_500(studio):
    reply, cookie = sign_in(studio, "Dora")
    qid = reply.json["question"]["id"]
    headers = {"Cookie": cookie, "Content-Type": "application/json"}
    for path, raw in [("/api/annotators/dora/submit", b'{"question_id": "%s", "action": "answer", "answer": ["\\ud800"]}'),
                      ("/api/annotators/dora/search", b'{"question_id": "%s", "query": "rev\\udfff"}')]:
        answer = request(studio.url, "POST", path, raw_body=raw.replace(b"%s", qid.encode()), headers=headers)
        assert answer.status == 400 and "Unicode" in answer.json["error"], answer.body
