"""A person's actions on one question, turned into the agents' trajectory and prediction records.

The studio journals every action as an event (events.jsonl in the annotator's run directory);
when the question is finished, its events become one line of trajectories.jsonl in the schema
of CONTRIBUTING.md ("Run directories and trajectories"), each action a step:

    search         tool_call {"name": "search", "arguments": {"query"}},
                   tool_result {"pages": [{"document", "page"}, ...]} or {"error": "..."},
                   timing {"tool_s": server seconds}
    view_page      tool_call {"name": "view_page", "arguments": {"document", "page"}},
                   tool_result {"dwell_s": seconds until the next action},
                   "via": result|next|previous|marked|oracle (a gold page shown under --oracle)
    mark_evidence  tool_call {"name": "mark_evidence", "arguments": {"document", "page", "marked": bool}}
    answer         tool_call {"name": "answer", "arguments": {"answer": [...], "citations": [...]}}
    give_up        "I can't find it": tool_call {"name": "give_up", "arguments": {"citations": [...]}}
    skip           tool_call {"name": "skip", "arguments": {}}

Every step also carries "time" (UTC, ISO 8601) and "elapsed_s" (seconds since the question was
first shown); "raw_output" is the action in the agents' flat tool-call form (a search step's is
exactly what the BM25 agent would emit, `{"tool": "search", "query": "..."}`); "input_delta" holds
the question on the first step (what the screen showed before the first action). Tokens are absent.
The trajectory's "condition" is "search", or "oracle" when the gold evidence pages were shown
with the question (MADQA's human oracle; `dossier studio --oracle`), then "oracle_pages" lists
them (empty for a question without gold evidence); the prediction's extra carries the same
"condition", so `dossier eval` reports such runs apart. The prediction's `search_history` lists the queries (MADQA's effort) and `iterations` counts
searches plus the final answer (none for a skip), as a model's turns would.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from engine.datasets.formats import Evidence, Prediction, Question

__all__ = ["ACTIONS", "FINISH", "NOT_FOUND_ANSWER", "iso_time", "marked_pages", "build_records"]

# event type -> tool name in the trajectory
ACTIONS = {"search": "search", "view": "view_page", "mark": "mark_evidence", "answer": "answer",
           "not_found": "give_up", "skip": "skip"}
FINISH = {"answer": "answered", "not_found": "not_found", "skip": "skipped"}  # terminal event -> final reason
NOT_FOUND_ANSWER = "I can't find it"  # a refusal to MADQA's taxonomy (engine/eval/answers.py)


def iso_time(t: float) -> str:
    """Unix seconds as UTC ISO 8601 with milliseconds, e.g. 2026-05-01T09:30:12.345Z."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(t * 1000) % 1000:03d}Z"


def marked_pages(events: list[dict]) -> list[Evidence]:
    """The pages marked as evidence after these events, in the order they were (last) marked."""
    marked: dict[tuple[str, int], None] = {}
    for event in events:
        if event["type"] == "mark":
            key = (event["document"], event["page"])
            marked.pop(key, None)
            if event["marked"]:
                marked[key] = None
    return [Evidence(d, p) for d, p in marked]


def _step(event: dict, number: int, opened: float, next_t: float | None) -> dict:
    kind = event["type"]
    page = {"document": event.get("document"), "page": event.get("page")}
    if kind == "search":
        arguments = {"query": event["query"]}
        result = {"error": event["error"]} if event.get("error") else {"pages": event["pages"]}
    elif kind == "view":
        arguments = page
        result = {"dwell_s": None if next_t is None else round(next_t - event["t"], 3)}
    elif kind == "mark":
        arguments = {**page, "marked": event["marked"]}
        result = None
    elif kind == "answer":
        arguments = {"answer": event["answer"], "citations": event["citations"]}
        result = None
    elif kind == "not_found":
        arguments = {"citations": event["citations"]}
        result = None
    else:  # skip
        arguments, result = {}, None
    name = ACTIONS[kind]
    step = {"step": number, "input_delta": "", "raw_output": json.dumps({"tool": name, **arguments}, ensure_ascii=False),
            "tool_call": {"name": name, "arguments": arguments}, "tool_result": result,
            "time": event["time"], "elapsed_s": round(event["t"] - opened, 3)}
    if kind == "search":
        step["timing"] = {"tool_s": event["server_s"]}
    if kind == "view":
        step["via"] = event.get("via", "result")
    return step


def build_records(question: Question, events: list[dict], annotator: str,
                  oracle_pages: list[Evidence] | None = None) -> tuple[dict, Prediction]:
    """The trajectory line and the prediction of one finished question.

    Args:
        question: the question answered.
        events: its journal events in order: "open"/"resume" first, a terminal one
            (answer, not_found or skip) last.
        annotator: the annotator's name, recorded on both records.
        oracle_pages: the gold pages shown with the question under the oracle condition; None
            for the search condition.
    """
    assert events and events[-1]["type"] in FINISH, "a question's records need its terminal event"
    opened = events[0]["t"]
    actions = [e for e in events if e["type"] in ACTIONS]
    steps = []
    for i, event in enumerate(actions):
        next_t = actions[i + 1]["t"] if i + 1 < len(actions) else None
        steps.append(_step(event, i + 1, opened, next_t))
    if steps:
        steps[0]["input_delta"] = question.question
    last = events[-1]
    reason = FINISH[last["type"]]
    citations = [Evidence.from_json(c, "studio") for c in last.get("citations", [])]
    answer = last["answer"] if reason == "answered" else None
    wall_s = round(last["t"] - opened, 3)
    condition = "search" if oracle_pages is None else "oracle"
    trajectory = {
        "id": question.id, "question": question.question, "agent": "human", "annotator": annotator,
        "condition": condition, **({} if oracle_pages is None else {"oracle_pages": [e.to_json() for e in oracle_pages]}),
        "opened": [e["time"] for e in events if e["type"] in ("open", "resume")],
        "steps": steps,
        "final": {"answer": answer, "citations": [c.to_json() for c in citations], "reason": reason},
        "wall_s": wall_s,
    }
    queries = [e["query"] for e in actions if e["type"] == "search"]
    extra = {"agent": "human", "annotator": annotator, "condition": condition, "finish": reason, "wall_s": wall_s, "steps": len(steps),
             "page_views": sum(1 for e in actions if e["type"] == "view")}
    prediction_answer = answer if reason == "answered" else (NOT_FOUND_ANSWER if reason == "not_found" else None)
    turns = len(queries) + (0 if reason == "skipped" else 1)  # a skip gives no answer: no final turn
    prediction = Prediction(question.id, question.question, prediction_answer, citations, queries, turns, extra)
    return trajectory, prediction
