"""The semantic-accuracy judge: its interface, its rubric, and the two-stage scoring.

A judge is any callable `(question, gold_variants, answer) -> verdict` where the verdict is
"correct" (1.0), "partial" (0.5) or "incorrect" (0.0). Tests use `ScriptedJudge`; an LLM
running on Dossier's own engine plugs in through `engine/eval/llm_judge.py`.

Scoring follows MADQA: an empty answer scores 0 without a judge call; an exact match (or
ANLS* = 1) scores 1 without a judge call; an answer longer than 2,000 characters (as JSON)
scores 0 without a call (MADQA's harness does the same); everything else goes to the judge.
One addition: an answer that plainly declines ("I cannot find ...", "Unknown"; see
`engine.eval.metrics.answers.is_refusal`) scores 0 without a call. The rubric's first rule says the
same, and a small local judge should not get the chance to accept a refusal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Protocol

from engine.eval.metrics.answers import is_empty_answer, is_refusal
from tools.errors import DossierError

__all__ = [
    "Verdict",
    "Judge",
    "ScriptedJudge",
    "RUBRIC",
    "build_judge_prompt",
    "parse_verdict",
    "semantic_score",
    "MAX_JUDGED_ANSWER_CHARS",
]

MAX_JUDGED_ANSWER_CHARS = 2000  # longer answers are incorrect without asking the judge


class Verdict(str, Enum):
    correct = "correct"
    partial = "partial"
    incorrect = "incorrect"

    @property
    def score(self) -> float:
        return {"correct": 1.0, "partial": 0.5, "incorrect": 0.0}[self.value]

    @classmethod
    def coerce(cls, value: object) -> Verdict:
        """Accept a Verdict, its name in any case, or a score 1 / 0.5 / 0."""
        if isinstance(value, Verdict):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            by_score = {1.0: cls.correct, 0.5: cls.partial, 0.0: cls.incorrect}
            if float(value) in by_score:
                return by_score[float(value)]
        if isinstance(value, str) and value.strip().lower() in cls.__members__:
            return cls[value.strip().lower()]
        raise DossierError(f"judge verdict {value!r} is not one of correct, partial, incorrect (or 1, 0.5, 0)")


class Judge(Protocol):
    def __call__(self, question: str, gold_variants: list[list[str]], answer: str | list[str]) -> Verdict | str: ...


# MADQA's rubric (Section 3.1 and its harness), in our own words; applied in this order.
RUBRIC = """You grade one answer to a question about a document collection against the accepted answers.
Work through these checks in order and stop at the first that decides the grade.

1. Refusal. If the answer declines, says it cannot answer, or says the information is missing: incorrect.
2. Content. If the core meaning matches none of the accepted answers (wrong fact, wrong value): incorrect.
3. Critical errors, each one makes the answer incorrect:
   - a number without the scale or unit qualifier that sets its magnitude ("50" when "$50 million" is accepted);
   - a yes/no (or true/false) question answered without an explicit Yes or No;
   - a different entity or value from the one asked for (other person, company, date, number);
   - a list that mixes correct items with wrong ones.
4. Format (only when the content is right). The accepted answer is a list of several short items and the
   answer gives them as one comma-separated string instead of a list: partial.
5. Length (only when the content is right).
   - Qualifiers, relevant context or clarifying words that do not change the fact: correct.
   - Details nobody asked for, or more precision than requested (a time when only a date was asked): partial.
   - Several sentences, a paragraph, or a preamble such as "Based on the document, ...": incorrect.

Otherwise the answer is correct."""

_PROMPT = """{rubric}

Question: {question}
Accepted answers (each is a list of parts): {gold}
Answer to grade: {answer}

Reply with JSON only: {{"verdict": "correct" | "partial" | "incorrect"}}"""

_JSON_VERDICT = re.compile(r'"verdict"\s*:\s*"(correct|partial|incorrect)"', re.IGNORECASE)
_WORD_VERDICT = re.compile(r"\b(correct|partial|incorrect)\b", re.IGNORECASE)


def build_judge_prompt(question: str, gold_variants: list[list[str]], answer: str | list[str]) -> str:
    """Render the rubric prompt for one item (answers are shown as JSON so lists stay visible)."""
    return _PROMPT.format(
        rubric=RUBRIC,
        question=question,
        gold=json.dumps(gold_variants, ensure_ascii=False),
        answer=json.dumps(answer, ensure_ascii=False),
    )


def parse_verdict(text: str) -> Verdict:
    """Read the verdict from a model's reply: the last `"verdict": ...` JSON field, else the last grade word.

    Raises:
        DossierError: the reply names no grade.
    """
    found = _JSON_VERDICT.findall(text) or _WORD_VERDICT.findall(text)
    if not found:
        raise DossierError(f"judge reply has no verdict (expected correct, partial or incorrect): {text[:200]!r}")
    return Verdict(found[-1].lower())


class ScriptedJudge:
    """A judge that answers from a table: by question text, else a default. Records every call.

    Args:
        verdicts: question text -> verdict (a Verdict, its name, or 1 / 0.5 / 0).
        default: the verdict for questions not in the table.
    """

    def __init__(self, verdicts: Mapping[str, object] | None = None, default: object = Verdict.incorrect):
        self.verdicts = {q: Verdict.coerce(v) for q, v in (verdicts or {}).items()}
        self.default = Verdict.coerce(default)
        self.calls: list[tuple[str, list[list[str]], str | list[str]]] = []

    def __call__(self, question: str, gold_variants: list[list[str]], answer: str | list[str]) -> Verdict:
        self.calls.append((question, gold_variants, answer))
        return self.verdicts.get(question, self.default)


def semantic_score(
    question: str,
    gold_variants: list[list[str]],
    answer: str | list[str] | None,
    *,
    exact: bool,
    anls: float,
    judge: Callable[..., object],
) -> tuple[float, str]:
    """Two-stage semantic score of one item.

    Args:
        question: the question text (the judge sees it).
        gold_variants: accepted answers.
        answer: the prediction's answer (None when the item has no prediction).
        exact: whether the answer matched a variant exactly after normalisation.
        anls: the item's ANLS*.
        judge: the judge callable.

    Returns:
        (score in {0, 0.5, 1}, how it was decided: "empty", "exact", "refusal", "too_long" or "judge").
    """
    if answer is None or is_empty_answer(answer):
        return 0.0, "empty"
    if exact or anls >= 1.0:
        return 1.0, "exact"
    if is_refusal(answer):
        return 0.0, "refusal"
    if len(json.dumps(answer, ensure_ascii=False)) > MAX_JUDGED_ANSWER_CHARS:
        return 0.0, "too_long"
    return Verdict.coerce(judge(question, gold_variants, answer)).score, "judge"
