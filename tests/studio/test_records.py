"""A person's actions become the agents' trajectory schema; an annotator's run resumes from its files."""

from __future__ import annotations

import json

import pytest

from engine.datasets.formats import Evidence, Question, load_predictions
from engine.eval.trajectories import load_trajectories, parse_episode
from engine.studio.annotator import AnnotatorRun, ConflictError, annotator_slug
from engine.studio.trajectory import build_records, marked_pages
from tools.errors import DossierError

QUESTIONS = [Question("q1", "Revenue in 2023?", [["$48,250"]], [Evidence("a", 2)]),
             Question("q2", "Capex in 2022?", [["$2,115"]], [Evidence("b", 2)]),
             Question("q3", "Outlook?", [["growth"]], [Evidence("a", 3)])]
META = {"agent": "human", "model": "human", "questions": "/q.jsonl", "corpus": "/c", "settings": {"k": 5}, "seed": None}


def _event(t, kind, **fields):
    return {"seq": 0, "t": t, "time": f"T{t}", "question_id": "q1", "type": kind, **fields}


def test_events_become_steps_with_times_dwell_and_the_marked_pages_as_citations():
    events = [_event(100.0, "open"),
              _event(103.0, "search", query='"net revenue" 2023', pages=[{"document": "a", "page": 2}], error=None,
                     server_s=0.004),
              _event(105.0, "view", document="a", page=2, via="result"),
              _event(111.5, "view", document="a", page=3, via="next"),
              _event(112.0, "mark", document="a", page=3, marked=True),
              _event(113.0, "mark", document="a", page=2, marked=True),
              _event(114.0, "mark", document="a", page=3, marked=False),
              _event(116.0, "search", query="revenue AND (", pages=[], error="query syntax error", server_s=0.001),
              _event(120.0, "answer", answer=["$48,250"], citations=[{"document": "a", "page": 2}])]
    trajectory, prediction = build_records(QUESTIONS[0], events, "Ana")
    steps = trajectory["steps"]
    assert [s["tool_call"]["name"] for s in steps] == ["search", "view_page", "view_page", "mark_evidence",
                                                       "mark_evidence", "mark_evidence", "search", "answer"]
    assert [s["step"] for s in steps] == list(range(1, 9))
    assert steps[0]["tool_result"] == {"pages": [{"document": "a", "page": 2}]}
    assert steps[0]["timing"] == {"tool_s": 0.004} and steps[0]["elapsed_s"] == 3.0 and steps[0]["time"] == "T103.0"
    assert json.loads(steps[0]["raw_output"]) == {"tool": "search", "query": '"net revenue" 2023'}  # the agent's form
    assert steps[0]["input_delta"] == "Revenue in 2023?"
    assert steps[1]["tool_result"] == {"dwell_s": 6.5} and steps[1]["via"] == "result"
    assert steps[2]["tool_result"] == {"dwell_s": 0.5} and steps[2]["via"] == "next"
    assert steps[6]["tool_result"] == {"error": "query syntax error"}
    assert trajectory["final"] == {"answer": ["$48,250"], "citations": [{"document": "a", "page": 2}], "reason": "answered"}
    assert trajectory["agent"] == "human" and trajectory["annotator"] == "Ana" and trajectory["wall_s"] == 20.0
    assert prediction.search_history == ['"net revenue" 2023', "revenue AND ("] and prediction.iterations == 3
    assert prediction.citations == [Evidence("a", 2)] and prediction.extra["page_views"] == 2
    assert marked_pages(events) == [Evidence("a", 2)]
    episode = parse_episode(json.loads(json.dumps(trajectory)), "t")  # what `dossier eval` reads
    assert [s.query for s in episode.searches] == ['"net revenue" 2023', "revenue AND ("]
    assert episode.searches[0].pages == (Evidence("a", 2),) and episode.final_answer == ["$48,250"]


def test_cant_find_is_a_refusal_and_skip_has_no_answer_and_no_effort():
    from engine.eval.metrics.answers import is_refusal

    _, gave_up = build_records(QUESTIONS[0], [_event(1.0, "open"), _event(2.0, "not_found", citations=[])], "Ana")
    assert is_refusal(gave_up.answer) and gave_up.extra["finish"] == "not_found" and gave_up.iterations == 1
    trajectory, skipped = build_records(QUESTIONS[0], [_event(1.0, "open"), _event(4.0, "skip")], "Ana")
    assert skipped.answer is None and skipped.iterations == 0 and skipped.extra["finish"] == "skipped"
    assert trajectory["final"]["reason"] == "skipped" and trajectory["steps"][0]["tool_call"]["name"] == "skip"


def test_annotator_names_become_safe_directory_names():
    assert annotator_slug("  Ana María ") == "ana-maría"
    assert annotator_slug("o'brien.j") == "o-brien.j"
    for bad in ("", "../etc", "/root", "a/b", "x" * 41, ".hidden", "a\\b", "<b>"):
        with pytest.raises(DossierError, match="annotator name"):
            annotator_slug(bad)


def test_a_run_resumes_in_progress_work_and_commits_a_submission_its_records_missed(tmp_path):
    run = AnnotatorRun(tmp_path / "ana", "Ana", QUESTIONS, META)
    assert run.present().id == "q1"
    run.record("q1", "search", query="revenue", pages=[{"document": "a", "page": 2}], error=None, server_s=0.01)
    run.record("q1", "mark", document="a", page=2, marked=True)
    run.finish("q1", "answer", ["$48,250"])
    assert run.present().id == "q2"
    run.record("q2", "search", query="capex", pages=[], error=None, server_s=0.01)
    with pytest.raises(ConflictError, match="already finished"):
        run.record("q1", "view", document="a", page=2, via="result")
    with pytest.raises(ConflictError, match="not the current one"):
        run.record("q3", "view", document="a", page=2, via="result")
    # a restart: the same files, a new object
    again = AnnotatorRun(tmp_path / "ana", "someone else", QUESTIONS, META)
    assert again.name == "Ana" and again.current().id == "q2" and again.progress() == {"done": 1, "total": 3}
    assert [e["type"] for e in again.question_events("q2")] == ["open", "search"]
    # the server dies after journalling a submission but before writing its records
    again._log("q2", "skip")
    with (tmp_path / "ana" / "events.jsonl").open("a") as fh:
        fh.write('{"seq": 99, "t": 1')  # and a torn line from the kill
    third = AnnotatorRun(tmp_path / "ana", "Ana", QUESTIONS, META)
    assert third.current().id == "q3" and third.progress()["done"] == 2
    predictions, errors = load_predictions(tmp_path / "ana" / "predictions.jsonl")
    episodes, _ = load_trajectories(tmp_path / "ana" / "trajectories.jsonl")
    assert not errors and [p.id for p in predictions] == ["q1", "q2"] and [e.id for e in episodes] == ["q1", "q2"]
    assert predictions[0].citations == [Evidence("a", 2)] and predictions[1].extra["finish"] == "skipped"
    run_json = json.loads((tmp_path / "ana" / "run.json").read_text())
    assert run_json["agent"] == "human" and run_json["annotator"] == "Ana" and run_json["settings"] == {"k": 5}


def test_a_run_started_with_other_settings_is_not_resumed(tmp_path):
    AnnotatorRun(tmp_path / "ana", "Ana", QUESTIONS, META)
    with pytest.raises(DossierError, match="different settings"):
        AnnotatorRun(tmp_path / "ana", "Ana", QUESTIONS, {**META, "settings": {"k": 10}})
