"""The studio's JSON API against a live server: the agents' search, the flow of one question, errors."""

from __future__ import annotations

import pytest

from engine.agents.env import AgentEnv
from engine.agents.settings import AgentSettings
from engine.studio import StudioConfig, serve_in_thread

from .conftest import request


@pytest.fixture(scope="module")
def live(studio_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("api-runs")
    with serve_in_thread(StudioConfig(studio_files.corpus, studio_files.questions, out, port=0)) as server:
        yield server


def _post(live, path, body):
    return request(live.url, "POST", path, body)


def test_search_is_the_agents_tool_same_hits_same_order_same_k(live, studio_files):
    env = AgentEnv(studio_files.corpus)
    assert live.studio.config.k == AgentSettings().k == 5 and live.studio.config.search_mode == AgentSettings().search_mode
    state = _post(live, "/api/signin", {"name": "Parity"}).json
    qid = state["question"]["id"]
    for query in ['"net income"', "revenue NOT 2022", "(revenue OR expenditure) 2022", "rev*", "thousand"]:
        reply = _post(live, "/api/annotators/parity/search", {"question_id": qid, "query": query})
        assert reply.status == 200, reply.body
        agent_hits, error = env.search(query, AgentSettings().k)
        assert error is None and reply.json["error"] is None
        assert [(h["document"], h["page"]) for h in reply.json["hits"]] == [(h.document, h.page) for h in agent_hits]
        assert [h["score"] for h in reply.json["hits"]] == [round(float(h.score), 4) for h in agent_hits]
    wide = "revenue OR outlook OR capital OR northwind OR 2022"  # matches all 6 pages: k cuts it to 5
    assert len(_post(live, "/api/annotators/parity/search", {"question_id": qid, "query": wide}).json["hits"]) == 5
    # a syntax error comes back as the agents get it, not as a failure of the request
    bad = _post(live, "/api/annotators/parity/search", {"question_id": qid, "query": "revenue AND ("}).json
    assert bad["hits"] == [] and "query syntax error" in bad["error"] and bad["error"] == env.search("revenue AND (", 5)[1]


def test_snippets_mark_the_query_words_and_keep_page_text_as_data(live):
    qid = _post(live, "/api/signin", {"name": "Snippets"}).json["question"]["id"]
    hits = _post(live, "/api/annotators/snippets/search", {"question_id": qid, "query": '"net income" 2023'}).json["hits"]
    assert hits[0]["document"] == "annual-2023" and hits[0]["page"] == 2
    marked = [text for text, match in hits[0]["snippet"] if match]
    assert {w.lower() for w in marked} >= {"net", "income", "2023"}
    memo = _post(live, "/api/annotators/snippets/search", {"question_id": qid, "query": "script"}).json["hits"][0]
    assert memo["document"] == "memo"
    shown = "".join(text for text, _ in memo["snippet"])  # as text, for textContent
    assert "script>window.__pwned = 1</script> <img src=x onerror=" in shown


def test_one_question_from_search_to_answer_and_the_next_one(live):
    state = _post(live, "/api/signin", {"name": "Flow"}).json
    assert state["progress"] == {"done": 0, "total": 4} and state["question"]["id"] == "q1"
    base = "/api/annotators/flow"
    _post(live, f"{base}/search", {"question_id": "q1", "query": "revenue 2023"})
    view = _post(live, f"{base}/view", {"question_id": "q1", "document": "annual-2023", "page": 2, "via": "result"})
    assert view.json["page_count"] == 3
    assert _post(live, f"{base}/mark", {"question_id": "q1", "document": "annual-2023", "page": 2,
                                         "marked": True}).json["marked"] == [{"document": "annual-2023", "page": 2}]
    again = request(live.url, "GET", f"{base}/state").json  # a refresh: the work so far comes back
    assert again["searches"] == ["revenue 2023"] and again["last_search"]["hits"][0]["page"] == 2
    assert again["marked"] == [{"document": "annual-2023", "page": 2}]
    assert again["viewing"] == {"document": "annual-2023", "page": 2, "page_count": 3}
    empty = _post(live, f"{base}/submit", {"question_id": "q1", "action": "answer", "answer": ["  "]})
    assert empty.status == 400 and "at least one non-empty value" in empty.json["error"]
    after = _post(live, f"{base}/submit", {"question_id": "q1", "action": "answer", "answer": ["$48,250"]}).json
    assert after["progress"]["done"] == 1 and after["question"]["id"] == "q2" and after["last_search"] is None
    stale = _post(live, f"{base}/mark", {"question_id": "q1", "document": "annual-2023", "page": 2, "marked": False})
    assert stale.status == 409 and "already finished" in stale.json["error"]


def test_malformed_requests_get_a_4xx_with_a_message(live):
    qid = _post(live, "/api/signin", {"name": "Errors"}).json["question"]["id"]
    base = "/api/annotators/errors"
    cases = [
        (_post(live, "/api/signin", {"name": "../../etc"}), 400, "annotator name"),
        (_post(live, "/api/signin", {"nom": "x"}), 422, "name"),
        (_post(live, f"{base}/search", {"question_id": qid}), 422, "query"),
        (_post(live, f"{base}/search", {"question_id": qid, "query": "x" * 1001}), 422, "at most 1000"),
        (_post(live, f"{base}/view", {"question_id": qid, "document": "annual-2023", "page": "two"}), 422, "page"),
        (_post(live, f"{base}/view", {"question_id": qid, "document": "annual-2023", "page": 9}), 404, "has 3 pages"),
        (_post(live, f"{base}/submit", {"question_id": qid, "action": "maybe"}), 422, "action"),
        (request(live.url, "POST", f"{base}/search", raw_body=b"{not json", headers={"Content-Type": "application/json"}),
         422, "malformed request"),
        (request(live.url, "GET", "/api/annotators/nobody/state"), 404, "sign in first"),
        (request(live.url, "GET", "/no/such/route"), 404, "not found"),
        (request(live.url, "DELETE", "/api/info"), 405, "Method Not Allowed"),
    ]
    for reply, status, words in cases:
        assert reply.status == status, (reply.status, reply.body)
        assert reply.headers["content-type"] == "application/json" and words in reply.json["error"], reply.json


def test_an_unexpected_failure_is_a_json_500_without_a_traceback(live, monkeypatch):
    qid = _post(live, "/api/signin", {"name": "Crash"}).json["question"]["id"]

    def broken(query):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(live.studio, "search", broken)
    reply = _post(live, "/api/annotators/crash/search", {"question_id": qid, "query": "revenue"})
    assert reply.status == 500 and reply.json == {"error": "internal error (RuntimeError); the server log has the details"}
    assert b"Traceback" not in reply.body and b"secret" not in reply.body


def test_a_server_restart_loses_nothing_and_two_annotators_work_at_once(studio_files, tmp_path):
    config = StudioConfig(studio_files.corpus, studio_files.questions, tmp_path / "runs", port=0)
    with serve_in_thread(config) as first:
        for name in ("Ana", "Ben"):
            assert _post(first, "/api/signin", {"name": name}).json["question"]["id"] == "q1"
        _post(first, "/api/annotators/ana/submit", {"question_id": "q1", "action": "answer", "answer": ["$48,250"]})
        _post(first, "/api/annotators/ben/search", {"question_id": "q1", "query": "revenue"})
        _post(first, "/api/annotators/ana/search", {"question_id": "q2", "query": '"capital expenditure"'})
        _post(first, "/api/annotators/ana/mark", {"question_id": "q2", "document": "annual-2022", "page": 2,
                                                  "marked": True})
    with serve_in_thread(config) as second:  # a new process would read the same files
        ana = request(second.url, "GET", "/api/annotators/ana/state").json
        ben = request(second.url, "GET", "/api/annotators/ben/state").json
    assert ana["progress"]["done"] == 1 and ana["question"]["id"] == "q2"
    assert ana["searches"] == ['"capital expenditure"'] and ana["marked"] == [{"document": "annual-2022", "page": 2}]
    assert ben["progress"]["done"] == 0 and ben["searches"] == ["revenue"] and ben["marked"] == []
    assert {p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")} == {"ana", "ben"}
