"""Pairing predictions (and trajectories) with gold questions.

A record matches a gold item by `id`; failing that, by its question text with surrounding
whitespace stripped (only when that text belongs to exactly one gold item). Every gold item
keeps its place in the result; one without a prediction is scored as wrong and counted in
the report. Predictions that match nothing, and second predictions for an item that already
has one, are returned separately so the report can say how many there were.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from engine.datasets.formats import Prediction, Question
from tools.errors import DossierError

__all__ = ["GoldIndex", "Matched", "match_predictions", "match_records"]

T = TypeVar("T")


class GoldIndex:
    """Looks gold questions up by id, else by stripped question text.

    Raises:
        DossierError: two gold questions share an id.
    """

    def __init__(self, questions: list[Question]) -> None:
        self.by_id: dict[str, Question] = {}
        for question in questions:
            if question.id in self.by_id:
                raise DossierError(f"gold question id {question.id!r} appears twice; ids must be unique")
            self.by_id[question.id] = question
        texts = Counter(q.question.strip() for q in questions)
        self.by_text = {q.question.strip(): q for q in questions if texts[q.question.strip()] == 1}

    def find(self, record_id: str | None, question: str | None) -> tuple[Question | None, str]:
        """(gold question or None, "id" | "text" | "none"): how the record was matched."""
        if record_id is not None and record_id in self.by_id:
            return self.by_id[record_id], "id"
        text = (question or "").strip()
        if text and text in self.by_text:
            return self.by_text[text], "text"
        return None, "none"


@dataclass(slots=True)
class Matched:
    """Every gold item with its record (or None), plus what did not fit."""

    pairs: list[tuple[Question, object | None]]  # in gold order
    unmatched: list = field(default_factory=list)  # records matching no gold item
    duplicates: list = field(default_factory=list)  # later records for an item already matched
    matched_by_text: int = 0  # records matched by question text rather than id

    @property
    def missing(self) -> int:
        """Gold items without a record."""
        return sum(1 for _, record in self.pairs if record is None)


def match_records(questions: list[Question], records: Iterable[T], index: GoldIndex | None = None) -> Matched:
    """Match records that have `.id` and `.question` (predictions, trajectories) to gold questions."""
    index = index or GoldIndex(questions)
    chosen: dict[str, T] = {}
    result = Matched(pairs=[])
    for record in records:
        gold, how = index.find(getattr(record, "id", None), getattr(record, "question", None))
        if gold is None:
            result.unmatched.append(record)
        elif gold.id in chosen:
            result.duplicates.append(record)
        else:
            chosen[gold.id] = record
            result.matched_by_text += how == "text"
    result.pairs = [(q, chosen.get(q.id)) for q in questions]
    return result


def match_predictions(questions: list[Question], predictions: list[Prediction]) -> Matched:
    """Match predictions to gold questions (see the module docstring for the rule)."""
    return match_records(questions, predictions)
