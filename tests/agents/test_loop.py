"""Agent loop semantics with scripted policies: forced answer at T, malformed calls, citations, trajectories."""

import json

import pytest

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.bm25 import NO_ANSWER
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets import load_predictions
from tests.agents.scripted import always_search, build_corpus, questions, search_then_answer


def _run(tmp_path, policy, n=3, **settings):
    env = AgentEnv(build_corpus(tmp_path / "c"), page_chars=400)
    backend = ScriptedBackend(policy)
    summary = RolloutRunner(backend, AgentSettings(**settings), env, tmp_path / "run", concurrency=2).run(questions(n))
    preds, errors = load_predictions(tmp_path / "run" / "predictions.jsonl")
    assert errors == []
    trajs = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    return summary, {p.id: p for p in preds}, {t["id"]: t for t in trajs}, backend


def test_search_then_answer_records_citations_history_and_steps(tmp_path):
    summary, preds, trajs, backend = _run(tmp_path, search_then_answer)
    assert summary.episodes == 3 and summary.reasons == {"answered": 3}
    p = preds["q1"]
    assert p.answer == ["$48,250"] and p.iterations == 2 and p.search_history == ["revenue 2019"]
    assert [(c.document, c.page) for c in p.citations] == [("report", 1)]  # "1" as a string became 1
    steps = trajs["q1"]["steps"]
    assert [s["tool_call"]["name"] for s in steps] == ["search", "answer"]
    assert steps[0]["tool_result"]["pages"][0] == {"document": "report", "page": 1}
    assert steps[1]["tool_result"] is None and trajs["q1"]["final"]["reason"] == "answered"
    assert "File: report, Page: 1" in steps[1]["input_delta"]
    assert all(s["tokens"]["generated"] > 0 for s in steps)
    assert backend.opened == backend.closed == 3


def test_forced_answer_on_the_last_iteration_and_max_iteration_text(tmp_path):
    seen_last = []

    def policy(qid, turn, messages):
        if turn == 4:
            seen_last.append(messages[-1][1])
        return always_search(qid, turn, messages)

    summary, preds, trajs, _ = _run(tmp_path, policy, max_iterations=4)
    assert summary.reasons == {"max_iterations": 3}
    p = preds["q2"]
    assert p.answer == NO_ANSWER == "Maximum iterations reached without answer"
    assert p.iterations == 4 and len(p.search_history) == 3 and p.citations == []
    assert all("last turn: answer now" in text for text in seen_last)
    last = trajs["q2"]["steps"][-1]
    assert last["tool_call"] is None and "only the answer tool" in last["tool_result"]["error"]


def test_answer_on_the_forced_turn_is_kept(tmp_path):
    def policy(qid, turn, messages):
        if turn < 3:
            return always_search(qid, turn, messages)
        return json.dumps({"tool": "answer", "answer": ["late"], "citations": []})

    summary, preds, _, _ = _run(tmp_path, policy, max_iterations=3)
    assert summary.reasons == {"answered": 3} and preds["q1"].answer == ["late"] and preds["q1"].iterations == 3


def test_malformed_call_is_fed_back_not_a_crash(tmp_path):
    def policy(qid, turn, messages):
        if turn == 1:
            return '{"tool": "search", "query": '  # cut off
        if turn == 2:
            assert "not a valid tool call" in messages[-1][1]
            return json.dumps({"tool": "search", "query": "NOT"})  # a query that does not parse
        if turn == 3:
            assert "Search failed: query syntax error" in messages[-1][1]
            return json.dumps({"tool": "answer", "answer": ["x"], "citations": [{"file": "menu.pdf", "page": 2}]})
        raise AssertionError("too many turns")

    summary, preds, trajs, _ = _run(tmp_path, policy)
    assert summary.reasons == {"answered": 3}
    steps = trajs["q3"]["steps"]
    assert steps[0]["tool_call"] is None and "invalid JSON" in steps[0]["tool_result"]["error"]
    assert "query syntax error" in steps[1]["tool_result"]["error"]
    assert [(c.document, c.page) for c in preds["q3"].citations] == [("menu", 2)]


def test_trajectories_are_consistent_with_predictions(tmp_path):
    _, preds, trajs, _ = _run(tmp_path, search_then_answer, n=6)
    assert preds.keys() == trajs.keys()
    for qid, p in preds.items():
        steps = trajs[qid]["steps"]
        assert p.iterations == len(steps)
        assert p.search_history == [s["tool_call"]["arguments"]["query"] for s in steps if s["tool_call"]["name"] == "search"]
        assert trajs[qid]["final"]["answer"] == p.answer
        assert p.extra["tokens"]["generated"] == sum(s["tokens"]["generated"] for s in steps)


def test_runs_are_deterministic(tmp_path):
    _run(tmp_path / "a", search_then_answer, n=5)
    _run(tmp_path / "b", search_then_answer, n=5)
    first = sorted((tmp_path / "a" / "run" / "predictions.jsonl").read_text().splitlines())
    second = sorted((tmp_path / "b" / "run" / "predictions.jsonl").read_text().splitlines())
    strip = lambda lines: [{k: v for k, v in json.loads(x).items() if k != "wall_s"} for x in lines]  # noqa: E731
    assert strip(first) == strip(second)


@pytest.mark.parametrize("agent", ["rag", "oracle", "closed-book"])
def test_baselines(tmp_path, agent):
    seen = {}

    def policy(qid, turn, messages):
        seen[qid] = messages
        return json.dumps({"tool": "answer", "answer": ["a"], "citations": []})

    summary, preds, trajs, _ = _run(tmp_path, policy, agent=agent)
    assert summary.reasons == {"answered": 3}
    user = seen["q2"][-1][1]
    if agent == "oracle":
        assert "File: menu, Page: 1" in user and "Spaghetti" in user and preds["q2"].search_history == []
    elif agent == "rag":
        assert "File: menu, Page: 1" in user
        assert preds["q2"].search_history == ["How much does spaghetti cost?"]
        assert trajs["q2"]["steps"][0]["retrieved"]["pages"][0] == {"document": "menu", "page": 1}
    else:
        assert "File:" not in user
    assert all(p.iterations == 1 for p in preds.values())


def test_context_limit_forces_an_answer_then_gives_up(tmp_path):
    from engine.agents import prompts

    env = AgentEnv(build_corpus(tmp_path / "c"), page_chars=400)
    budget = len(prompts.SEARCH_AGENT_SYSTEM) + 200  # the first turn fits, a page of results does not
    backend = ScriptedBackend(lambda q, t, m: json.dumps({"tool": "search", "query": "revenue"}), context_chars=budget)
    summary = RolloutRunner(backend, AgentSettings(), env, tmp_path / "run").run(questions(1))
    assert summary.reasons == {"context_exhausted": 1}
    preds, _ = load_predictions(tmp_path / "run" / "predictions.jsonl")
    assert preds[0].answer == NO_ANSWER and preds[0].extra["finish"] == "context_exhausted"


def test_agent_search_can_use_the_late_reranker(tmp_path):
    from tools.late import build_late_index

    corpus = build_corpus(tmp_path / "c")
    build_late_index(corpus, "minilm")
    env = AgentEnv(corpus, rerank="late")
    hits, error = env.search("spaghetti OR revenue", k=3)
    assert error is None and {h.document for h in hits} == {"menu", "report"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
