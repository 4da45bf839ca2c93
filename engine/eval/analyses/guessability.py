"""Guessability of a closed-book run (MADQA Section 2.3, Appendix E.2, Table 9).

MADQA asks models to answer without the documents and sorts each correctly guessed question into
yes/no (random baseline 50 %), other binary choice (the question lists two options, baseline
50 %) and memorisation (everything else). Its classifier is an LLM (GPT-5 Mini); here the class
is decided from the gold item alone, so it is reproducible and covers every question, not just
the guessed ones:
  yes_no         every accepted answer is "yes" or "no" (normalised);
  binary_choice  not yes/no, the question has exactly one standalone "or" with fewer than two
                 commas before it ("A, B, or C" and "A, B, C or D" offer more than two), and an accepted
                 answer occurs in the question (the answer is one of the options offered). "Which of
                 A, B or C" (one comma, three options) is read as binary: a rule cannot tell it from
                 "Which costs more, A or B"; MADQA's LLM classifier can;
  memorisation   everything else: a correct guess means the model recalled the fact.
Reported per class: questions, correct, accuracy with a Wilson interval; and MADQA's decomposition
of the overall guess rate: chance = 50 % of the yes/no and binary questions' share of all items,
memorised = correct memorisation questions' share of all items.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from engine.eval.metrics.answers import answer_parts
from engine.eval.stats import wilson_interval

__all__ = ["GUESS_CLASSES", "guess_class", "guessability", "section"]

GUESS_CLASSES = ("yes_no", "binary_choice", "memorisation")
CHANCE = 0.5  # a random pick between two options
_YES_NO = {"yes", "no"}
_OR = re.compile(r"\bor\b", re.IGNORECASE)
_NON_WORD = re.compile(r"[^\w]+")


def _words(text: str) -> str:
    """Case-folded words joined by single spaces: punctuation never decides a match."""
    return " ".join(_NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


def guess_class(question: str, variants: Sequence[Sequence[str]]) -> str:
    """The guessability class of one gold item (see the module docstring)."""
    answers = [_words(" ".join(answer_parts(list(v)))) for v in variants]
    answers = [a for a in answers if a]
    if answers and all(a in _YES_NO for a in answers):
        return "yes_no"
    asked = f" {_words(question)} "
    ors = list(_OR.finditer(question))
    if (len(ors) == 1 and question[:ors[0].start()].count(",") < 2
            and any(f" {a} " in asked for a in answers)):
        return "binary_choice"
    return "memorisation"


def guessability(rows: Sequence[tuple[str, Sequence[Sequence[str]], bool]], level: float = 0.95) -> dict:
    """Accuracy per guessability class of a closed-book run.

    Args:
        rows: (question text, gold variants, correct) per gold item.
        level: confidence level of the Wilson intervals.

    Returns:
        {"n", "correct", "accuracy", "classes": {name: {"n", "correct", "accuracy", "ci", "chance"}},
         "chance_share", "memorised_share"} — the two shares are of all items, as MADQA's Table 9.
    """
    n = len(rows)
    classes = {}
    for name in GUESS_CLASSES:
        flags = [correct for question, variants, correct in rows if guess_class(question, variants) == name]
        k = sum(1 for f in flags if f)
        classes[name] = {"n": len(flags), "correct": k, "accuracy": k / len(flags) if flags else None,
                         "ci": list(wilson_interval(k, len(flags), level)) if flags else None,
                         "chance": None if name == "memorisation" else CHANCE}
    correct = sum(1 for *_, c in rows if c)
    two_way = classes["yes_no"]["n"] + classes["binary_choice"]["n"]
    return {"n": n, "correct": correct, "accuracy": correct / n if n else None, "classes": classes,
            "chance_share": CHANCE * two_way / n if n else None,
            "memorised_share": classes["memorisation"]["correct"] / n if n else None}


def section(inputs) -> dict:
    """The registered report section (engine/eval/sections.py), for agents that declare "guessability"."""
    return guessability([(question.question, question.answer_variants, item.correct)
                         for (question, _), item in zip(inputs.pairs, inputs.items)], inputs.level)
