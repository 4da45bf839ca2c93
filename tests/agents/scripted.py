"""Scripted policies and a tiny corpus for agent-loop tests (no model)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from engine.datasets.formats import Evidence, Question
from tests.pdfs import make_text_store

DOCS = {
    "report": ["Revenue in 2019 was $48,250 thousand.", "Capital expenditure was $2,740 in 2019.", "Outlook page."],
    "menu": ["Spaghetti with clams $18.00", "Cold brew $4.50"],
}


def build_corpus(root: Path) -> Path:
    from tools.search import build_index

    store = make_text_store(root, DOCS)
    build_index(store)
    return root


def questions(n: int = 3) -> list[Question]:
    base = [
        Question("q1", "What was revenue in 2019?", [["$48,250"]], [Evidence("report", 1)]),
        Question("q2", "How much does spaghetti cost?", [["$18.00"]], [Evidence("menu", 1)]),
        Question("q3", "What was capital expenditure?", [["$2,740"]], [Evidence("report", 2)]),
    ]
    out = list(base)
    while len(out) < n:
        i = len(out) + 1
        out.append(Question(f"q{i}", f"Synthetic question {i} about revenue?", [["x"]], [Evidence("report", 1)]))
    return out[:n]


def search_then_answer(qid: str, turn: int, messages) -> str:
    """Search on turn 1, answer on turn 2 citing the first hit as a string page number."""
    if turn == 1:
        return json.dumps({"tool": "search", "query": "revenue 2019" if qid != "q2" else "spaghetti"})
    last = messages[-1][1]
    doc, page = last.split("File: ", 1)[1].split("\n", 1)[0].split(", Page: ")
    return json.dumps({"tool": "answer", "answer": ["$48,250"], "citations": [{"document": doc, "page": page}]})


def always_search(qid: str, turn: int, messages) -> str:
    return json.dumps({"tool": "search", "query": f"revenue {turn}"})


def slow(policy, seconds: float):
    def wrapped(qid, turn, messages):
        time.sleep(seconds)
        return policy(qid, turn, messages)

    return wrapped


def counted(policy, written: list, stop_after: int | None = None):
    """`policy`, noting each (question id, turn) it writes in `written`; raises KeyboardInterrupt (a kill)
    instead of writing turn number `stop_after` + 1."""
    def wrapped(qid, turn, messages):
        if stop_after is not None and len(written) == stop_after:
            raise KeyboardInterrupt("stopped mid-run")
        written.append((qid, turn))
        return policy(qid, turn, messages)

    return wrapped


def episodes_without_times(out: Path) -> tuple[list, list]:
    """A run directory's predictions and trajectories, sorted by id, without their times."""
    def strip(record):
        if isinstance(record, list):
            return [strip(r) for r in record]
        if not isinstance(record, dict):
            return record
        return {k: strip(v) for k, v in record.items() if k not in ("wall_s", "seconds", "model_s", "timing", "cpu_s")}

    def read(name):
        return sorted((strip(json.loads(line)) for line in (out / name).read_text().splitlines()), key=lambda r: r["id"])

    return read("predictions.jsonl"), read("trajectories.jsonl")
