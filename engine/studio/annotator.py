"""One annotator's run directory: the event journal, resuming, and committing finished questions.

    OUT/<annotator>/run.json            agent "human", annotator, questions, corpus, settings
    OUT/<annotator>/events.jsonl        every action as it happens (fsynced): the journal
    OUT/<annotator>/trajectories.jsonl  one line per finished question (the agents' schema)
    OUT/<annotator>/predictions.jsonl   one line per finished question: the commit marker, written last

A refresh, a second tab or a server restart reads the same files: questions with a prediction
are done; the current question is the first one without, and its journal events (searches,
views, marks) are its state so far. A question whose terminal event reached the journal but
whose records did not (the server died in between) is committed when the run is next opened.
Thread-safe: the web server calls it from its thread pool.
"""

from __future__ import annotations

import re
import threading
import time
from importlib.metadata import version
from pathlib import Path

from engine.agents.run_dir import (append_record, check_resume, commit_episode, finished_ids, read_records,
                                   write_run_json)
from engine.datasets.formats import Evidence, Question
from engine.studio.trajectory import ACTIONS, FINISH, build_records, iso_time, marked_pages
from tools.errors import DossierError

__all__ = ["AnnotatorRun", "annotator_slug", "ConflictError"]

_NAME = re.compile(r"^[\w][\w .'-]{0,39}$")


class ConflictError(DossierError):
    """The request is about a question that is not the annotator's current one (a stale tab)."""


def annotator_slug(name: str) -> str:
    """The run-directory name of an annotator: 'Ana María' -> 'ana-maría'.

    Raises:
        DossierError: the name is empty, too long, or has characters other than letters,
            digits, spaces and . ' - _ (it becomes a directory name).
    """
    name = name.strip()
    if not _NAME.match(name):
        raise DossierError(f"annotator name {name[:60]!r} is not usable: use 1-40 letters, digits, spaces, "
                           "or . ' - _ (starting with a letter or digit)")
    slug = re.sub(r"[^\w.-]+", "-", name.casefold()).strip("-.")
    if not slug:
        raise DossierError(f"annotator name {name!r} needs at least one letter or digit")
    return slug


class AnnotatorRun:
    """The state of one annotator over the question set, backed by their run directory.

    Args:
        directory: OUT/<slug>.
        name: the annotator's display name (kept from run.json when the run exists).
        questions: the question set, in presentation order.
        meta: run.json's content for a new run; an existing run must agree on the keys in `RESUME_KEYS`.
        oracle_pages: under the oracle condition, question id -> the gold pages shown with it
            (recorded in each trajectory); None for the search condition.
    """

    RESUME_KEYS = ("agent", "questions", "corpus", "settings")

    def __init__(self, directory: Path, name: str, questions: list[Question], meta: dict,
                 oracle_pages: dict[str, list[Evidence]] | None = None):
        self.directory = Path(directory)
        self.oracle_pages = oracle_pages
        self.questions = questions
        self.by_id = {q.id: q for q in questions}
        self.lock = threading.RLock()
        self.directory.mkdir(parents=True, exist_ok=True)
        old = check_resume(self.directory, meta, self.RESUME_KEYS, "start the studio with another --out, or with the "
                           "options that run was started with")
        self.name = old.get("annotator", name) if old else name
        if old is None:
            write_run_json(self.directory, {**meta, "annotator": name, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                            "dossier_version": version("dossier")})
        self.events_path = self.directory / "events.jsonl"
        self.done = finished_ids(self.directory)  # repairs a torn last line and orphan trajectories
        self.events: dict[str, list[dict]] = {}
        self.seq = 0
        for event in self._read_journal():
            self.seq = max(self.seq, event.get("seq", 0))
            if event.get("question_id") in self.by_id and event["question_id"] not in self.done:
                self.events.setdefault(event["question_id"], []).append(event)
        for qid, events in list(self.events.items()):
            terminal = [i for i, e in enumerate(events) if e["type"] in FINISH]
            if terminal:  # submitted, but the records were not written: commit now
                self._commit(self.by_id[qid], events[:terminal[0] + 1])

    def _read_journal(self) -> list[dict]:
        # a line torn by a kill mid-write is skipped: the action it held was never acknowledged
        return [e for e in read_records(self.events_path) if "type" in e and "t" in e]

    # -- reads -------------------------------------------------------------------------------------
    def current(self) -> Question | None:
        """The first question without a finished record (None when every question is done)."""
        return next((q for q in self.questions if q.id not in self.done), None)

    def progress(self) -> dict:
        return {"done": sum(1 for q in self.questions if q.id in self.done), "total": len(self.questions)}

    def question_events(self, question_id: str) -> list[dict]:
        return list(self.events.get(question_id, []))

    # -- writes ------------------------------------------------------------------------------------
    def present(self) -> Question | None:
        """The current question, journalling that it was shown ("open" the first time, then "resume")."""
        with self.lock:
            question = self.current()
            if question is not None:
                self._log(question.id, "resume" if self.events.get(question.id) else "open")
            return question

    def record(self, question_id: str, kind: str, **fields) -> dict:
        """Journal one action on the current question (`kind` is an ACTIONS key but not a terminal one)."""
        assert kind in ACTIONS and kind not in FINISH, kind
        with self.lock:
            self._check_current(question_id)
            return self._log(question_id, kind, **fields)

    def finish(self, question_id: str, kind: str, answer: list[str] | None = None) -> dict:
        """Journal the terminal action (answer, not_found or skip), then write the trajectory and prediction.

        The citations are the pages marked as evidence at this moment (the server's record, not the client's).
        """
        assert kind in FINISH, kind
        with self.lock:
            self._check_current(question_id)
            events = self.events.get(question_id, [])
            citations = [c.to_json() for c in marked_pages(events)]
            fields = {"citations": citations} if kind != "skip" else {}
            if kind == "answer":
                fields["answer"] = answer
            self._log(question_id, kind, **fields)
            return self._commit(self.by_id[question_id], self.events[question_id])

    def require_current(self, question_id: str) -> None:
        """Raise ConflictError unless `question_id` is the current question."""
        with self.lock:
            self._check_current(question_id)

    def _check_current(self, question_id: str) -> None:
        current = self.current()
        if question_id in self.done:
            raise ConflictError(f"question {question_id!r} is already finished; reload the page to continue")
        if current is None or current.id != question_id:
            raise ConflictError(f"question {question_id!r} is not the current one"
                                + (f" ({current.id!r} is)" if current else " (all questions are done)")
                                + "; reload the page")
        if not self.events.get(question_id):
            self._log(question_id, "open")  # an action before the question was presented (an API client)

    def _log(self, question_id: str, kind: str, **fields) -> dict:
        self.seq += 1
        t = time.time()
        event = {"seq": self.seq, "t": round(t, 3), "time": iso_time(t), "question_id": question_id, "type": kind,
                 **fields}
        append_record(self.events_path, event)
        self.events.setdefault(question_id, []).append(event)
        return event

    def _commit(self, question: Question, events: list[dict]) -> dict:
        shown = None if self.oracle_pages is None else self.oracle_pages.get(question.id, [])
        trajectory, prediction = build_records(question, events, self.name, shown)
        commit_episode(self.directory, trajectory, prediction)  # the prediction, the commit marker, last
        self.done.add(question.id)
        self.events.pop(question.id, None)
        return trajectory
