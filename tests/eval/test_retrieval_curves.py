"""Cumulative gold hits by search (MADQA Fig. 22) and recovery after a failed first query (Fig. 23), by hand."""

import pytest

from engine.datasets.formats import Evidence, Prediction, Question
from engine.eval.analyses.retrieval_curve import cumulative_hits, recovery_after_failed_first_query
from engine.eval.evaluate import EvalConfig, evaluate
from engine.eval.trajectories import parse_episode


def search(*pages):
    return {"tool_call": {"name": "search", "arguments": {"query": "q"}},
            "tool_result": {"pages": [{"document": d, "page": p} for d, p in pages]}}


def answer(text):
    return {"tool_call": {"name": "answer", "arguments": {"answer": [text]}}, "tool_result": None}


def episode(qid, *steps):
    return parse_episode({"id": qid, "question": f"Question {qid}?", "steps": list(steps)}, "t")


# q1 gold (a, 1): search 1 misses, search 2 finds document a (page 2), search 3 finds page (a, 1); right
# q2 gold (b, 2): search 1 finds the page;                                                          right
# q3 gold (c, 1): one search, never a gold document;                                                wrong
# q4 gold (d, 1): answers without searching;                                                        wrong
# q5 has no gold evidence, q6 no episode: both left out
EPISODES = {
    "q1": episode("q1", search(("z", 1)), search(("a", 2)), search(("a", 1), ("z", 2)), answer("A")),
    "q2": episode("q2", search(("b", 2)), answer("B")),
    "q3": episode("q3", search(("x", 1)), answer("wrong")),
    "q4": episode("q4", answer("wrong")),
    "q5": episode("q5", search(("a", 1)), answer("E")),
}
ITEMS = [("q1", [Evidence("a", 1)], True), ("q2", [Evidence("b", 2)], True), ("q3", [Evidence("c", 1)], False),
         ("q4", [Evidence("d", 1)], False), ("q5", [], True), ("q6", [Evidence("f", 1)], True)]


def test_cumulative_document_and_page_hits_by_iteration():
    curve = cumulative_hits(ITEMS, EPISODES)
    assert curve["n"] == 4  # q1-q4
    assert [(r["i"], r["doc_hits"], r["page_hits"]) for r in curve["iterations"]] == [(1, 1, 1), (2, 2, 1), (3, 2, 2)]
    assert [r["doc_rate"] for r in curve["iterations"]] == [0.25, 0.5, 0.5]
    assert [r["page_rate"] for r in curve["iterations"]] == [0.25, 0.25, 0.5]


def test_recovery_after_a_failed_first_query():
    recovery = recovery_after_failed_first_query(ITEMS, EPISODES)
    assert (recovery["n"], recovery["never_searched"], recovery["needing_recovery"]) == (4, 1, 2)  # q1, q3
    assert (recovery["recovered"]["k"], recovery["recovered"]["n"]) == (1, 2) and recovery["recovered"]["rate"] == 0.5
    assert recovery["accuracy_recovered"]["rate"] == 1.0  # q1
    assert recovery["accuracy_not_recovered"]["rate"] == 0.0  # q3
    assert recovery["accuracy_needing_recovery"]["rate"] == 0.5
    assert recovery["accuracy_first_hit"]["k"] == recovery["accuracy_first_hit"]["n"] == 1  # q2
    low, high = recovery["recovered"]["ci"]
    assert low < 0.5 < high


def test_no_recovery_needed_gives_empty_shares():
    recovery = recovery_after_failed_first_query([("q2", [Evidence("b", 2)], True)], EPISODES)
    assert recovery["needing_recovery"] == 0 and recovery["recovered"]["rate"] is None
    assert cumulative_hits([], EPISODES) == {"n": 0, "iterations": []}


def test_evaluate_reports_both_from_trajectories():
    gold = [Question.from_json({"id": qid, "question": f"Question {qid}?", "answer_variants": [[ans]],
                                "evidence": [{"document": d, "page": 1}]}, "gold")
            for qid, ans, d in (("q1", "A", "a"), ("q2", "B", "b"), ("q3", "C", "c"), ("q4", "D", "d"))]
    predictions = [Prediction.from_json({"id": qid, "question": f"Question {qid}?", "answer": [ans]}, "p")
                   for qid, ans in (("q1", "A"), ("q2", "wrong"), ("q3", "wrong"), ("q4", "D"))]
    gold[1].evidence[:] = [Evidence("b", 2)]
    report = evaluate(gold, predictions, list(EPISODES.values()), EvalConfig(bootstrap=0)).report
    steps = report["steps"]
    assert [r["doc_rate"] for r in steps["cumulative_hits"]["iterations"]] == [0.25, 0.5, 0.5]
    assert steps["recovery"]["accuracy_recovered"]["rate"] == 1.0  # q1 answered right after recovering
    assert steps["recovery"]["accuracy_first_hit"]["rate"] == 0.0  # q2 found its page first, then answered wrong
    assert steps["first_query"]["doc_hit_rate"] == pytest.approx(steps["cumulative_hits"]["iterations"][0]["doc_rate"])
    no_trajectories = evaluate(gold, predictions, None, EvalConfig(bootstrap=0)).report
    assert no_trajectories["steps"] is None
