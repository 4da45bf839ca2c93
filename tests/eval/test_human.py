"""Human runs and human-vs-agent pairs in `dossier eval` (engine/eval/analyses/human.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from engine.cli.main import app
from engine.datasets.formats import Evidence, Question, write_jsonl
from engine.eval.stats import cohen_kappa, wilson_interval
from engine.studio.trajectory import build_records

runner = CliRunner()

GOLD = [Question(f"q{i}", f"Question {i}?", [[f"answer {i}"]], [Evidence(f"doc{i}", 2)]) for i in range(6)]


def _human_run(root, plan, gold_path):
    """A studio run directory built from events: plan[i] = (first query hits gold?, searches, seconds, outcome)."""
    root.mkdir(parents=True)
    trajectories, predictions = [], []
    for question, (hit_first, searches, seconds, outcome) in zip(GOLD, plan):
        gold = {"document": question.evidence[0].document, "page": 2}
        events = [{"t": 0.0, "time": "T0", "type": "open"}]
        for n in range(searches):
            pages = [gold] if (n == 0 and hit_first) or n == searches - 1 else [{"document": "other", "page": 1}]
            events.append({"t": 1.0 + n, "time": "T", "type": "search", "query": f"words {n}", "pages": pages,
                           "error": None, "server_s": 0.01})
        events.append({"t": 2.0, "time": "T", "type": "view", "document": gold["document"], "page": 2, "via": "result"})
        if outcome == "right":
            events.append({"t": seconds, "time": "T", "type": "answer", "answer": [question.answer_variants[0][0]],
                           "citations": [gold]})
        elif outcome == "wrong":
            events.append({"t": seconds, "time": "T", "type": "answer", "answer": ["nope"], "citations": [gold]})
        else:
            events.append({"t": seconds, "time": "T", "type": outcome})
            if outcome == "not_found":
                events[-1]["citations"] = []
        trajectory, prediction = build_records(question, events, "Ana")
        trajectories.append(trajectory)
        predictions.append(prediction)
    write_jsonl(root / "trajectories.jsonl", trajectories)
    write_jsonl(root / "predictions.jsonl", predictions)
    (root / "run.json").write_text(json.dumps({"agent": "human", "annotator": "Ana", "questions": str(gold_path)}))
    return root


def _agent_run(root, right, searches):
    root.mkdir(parents=True)
    predictions, trajectories = [], []
    for question in GOLD:
        i = int(question.id[1:])
        answer = question.answer_variants[0][0] if i in right else "nope"
        steps = [{"tool_call": {"name": "search", "arguments": {"query": f"q {n}"}},
                  "tool_result": {"pages": [{"document": "other", "page": 1}]}} for n in range(searches)]
        steps.append({"tool_call": {"name": "answer", "arguments": {"answer": [answer]}}, "tool_result": None})
        trajectories.append({"id": question.id, "question": question.question, "agent": "bm25", "steps": steps,
                             "final": {"answer": [answer]}})
        predictions.append({"id": question.id, "question": question.question, "answer": [answer], "citations": [],
                            "search_history": [f"q {n}" for n in range(searches)], "iterations": searches + 1,
                            "wall_s": 3.0})
    write_jsonl(root / "trajectories.jsonl", trajectories)
    write_jsonl(root / "predictions.jsonl", predictions)
    (root / "run.json").write_text(json.dumps({"agent": "bm25", "questions": str(root.parent / "q.jsonl")}))  # tmp/q.jsonl
    return root


PLAN = [(True, 1, 20.0, "right"), (True, 1, 40.0, "right"), (False, 3, 90.0, "right"),
        (True, 2, 30.0, "wrong"), (False, 2, 60.0, "not_found"), (False, 0, 5.0, "skip")]


def test_a_human_run_reports_searches_time_and_how_questions_ended(tmp_path):
    write_jsonl(tmp_path / "q.jsonl", GOLD)
    human = _human_run(tmp_path / "studio" / "ana", PLAN, tmp_path / "q.jsonl")
    result = runner.invoke(app, ["eval", str(human), "--format", "json", "--bootstrap", "0", "--no-drift"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    behaviour = report["behaviour"]
    assert behaviour["n"] == 6 and behaviour["searches_per_question"] == pytest.approx(9 / 6)
    assert behaviour["searches_median"] == 1.5 and behaviour["time_median_s"] == pytest.approx(35.0)
    assert behaviour["finish"] == {"answered": 4, "not_found": 1, "skipped": 1}
    assert behaviour["accuracy_not_skipped"] == pytest.approx(3 / 5)
    assert behaviour["accuracy_not_skipped_ci"] == pytest.approx(list(wilson_interval(3, 5)))
    assert behaviour["page_views_per_question"] == 1.0
    assert report["accuracy"] == pytest.approx(3 / 6)
    assert report["steps"]["first_query"]["page_hits"] == 3 and report["taxonomy"]["counts"]["refusal"] == 2
    assert report["kuiper_n"] == 5 and report["kuiper_dropped"] == 1  # the skip without a search has no effort
    text = runner.invoke(app, ["eval", str(human), "--bootstrap", "0", "--no-drift"]).output
    assert "searches per question 1.50 (median 1.5) · time per question median 35.0 s (mean 40.8 s)" in text
    assert "ended: answered 4, not found 1, skipped 1 · accuracy without the skipped 60.0% [23.1, 88.2] (n=5)" in text
    parent = runner.invoke(app, ["eval", str(tmp_path / "studio")])  # the studio directory, not a run
    assert "holds 1 runs (ana)" in str(parent.exception) and "dossier eval" in str(parent.exception)


def test_human_against_agent_side_by_side_with_kappa_and_the_2x2_table(tmp_path):
    write_jsonl(tmp_path / "q.jsonl", GOLD)
    human = _human_run(tmp_path / "studio" / "ana", PLAN, tmp_path / "q.jsonl")  # right on q0, q1, q2
    agent = _agent_run(tmp_path / "bm25", right={0, 3, 4}, searches=4)
    result = runner.invoke(app, ["eval", "compare", str(human), str(agent), "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["both_correct"], out["only_a_correct"], out["only_b_correct"], out["both_wrong"]) == (1, 2, 2, 1)
    human_right = [i in (0, 1, 2) for i in range(6)]
    agent_right = [i in (0, 3, 4) for i in range(6)]
    assert out["cohen_kappa"] == pytest.approx(cohen_kappa(human_right, agent_right))
    a, b = out["profile_a"], out["profile_b"]
    assert (a["searches_per_question"], b["searches_per_question"]) == (pytest.approx(1.5), 4.0)
    assert (a["first_query_page_hit"], b["first_query_page_hit"]) == (0.5, 0.0)
    assert (a["time_median_s"], b["time_median_s"]) == (35.0, 3.0)
    assert a["page_f1"] > b["page_f1"] == 0.0
    text = runner.invoke(app, ["eval", "compare", str(human), str(agent)]).output
    lines = text.splitlines()
    assert lines[0].split() == ["A", "ana", "B", "bm25"]
    assert [line for line in lines if line.startswith("searches per question")][0].split()[-2:] == ["1.50", "4.00"]
    assert [line for line in lines if line.startswith("first search hit a gold page")][0].split()[-2:] == ["50.0%", "0.0%"]
    assert "both correct 1 · only A 2 · only B 2 · both wrong 1" in text
