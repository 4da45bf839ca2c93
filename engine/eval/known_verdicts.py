"""Judge calibration items whose verdict is known by construction, built from a suite's own questions.

A judge calibrated on one suite's hand labels and used on another is trusted on answers it was
never measured on (issue 50: the sample suite's 41 labels were carried to FinanceBench, whose long
numeric answers they do not resemble). Items made from the suite being judged need no human:

- **gold** (right): an accepted answer restated in a sentence ("The answer is $1577.00."), so it
  reaches the judge rather than MADQA's exact-match stage;
- **perturbed** (wrong): the same sentence with every amount in the gold answer changed by 30 % or
  more (years are kept), the error a reader of a filing makes most; not made for a yes/no answer,
  whose verdict may rest on the yes or no rather than on its figures;
- **other** (wrong): another question's accepted answer, restated the same way; never a yes/no
  answer, which could be right for this question too;
- **refusal** (wrong): a refusal worded so MADQA's refusal rule does not catch it ("The filing does
  not disclose this figure."), since only those reach the judge.

Constructed wrong answers can be easier to reject than a model's own: a sentence identical to the gold
but for its figures is easy to compare. So real answers can join them (`answer_items`): a run's answers
to the questions whose gold is a number, right or wrong by the numeric scorer (the gold number within
1 %), which needs no judge either.

Every item is passed through the first stage of MADQA's scoring (`engine.eval.judge.semantic_score`)
and kept only if the judge would be asked about it: calibration measures the judge on what it decides.
The construction is seeded, so the same questions give the same items.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from engine.datasets.formats import Question
from engine.eval.judge import semantic_score
from engine.eval.metrics.anls import ANLSScorer
from engine.eval.metrics.answers import answer_parts, exact_match
from engine.eval.metrics.numeric import numeric_correct, numeric_gold

__all__ = ["known_verdict_items", "answer_items", "KINDS", "perturb_numbers"]

KINDS = ("gold", "perturbed", "other", "refusal", "answer")  # gold right, the next three wrong, answer either
_TEMPLATES = ("The answer is {}.", "According to the document: {}", "{} (from the document)")
_REFUSALS = ("The filing does not disclose this figure.", "This is not reported in the documents I was given.",
             "The pages I read do not give that.")
_YES_NO = re.compile(r"^\W*(?:yes|no)\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])(?<![A-Za-z]-)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?")  # not COVID-19
_MONTH = re.compile(r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+$", re.IGNORECASE)
_FACTORS = (0.5, 0.6, 0.7, 1.3, 1.5, 2.0, 3.0)


def _is_year(text: str) -> bool:
    return len(text) == 4 and text.isdigit() and 1900 <= int(text) <= 2100


def perturb_numbers(text: str, rng: random.Random) -> str | None:
    """`text` with every amount scaled by a factor of at least 30 % away from 1, in its own format.

    Keeps thousands separators and the number of decimals; leaves years (1900-2100), days after a month
    and numbers inside names (COVID-19) alone. None when the text holds no amount to change.
    """
    changed = False

    def scale(match: re.Match) -> str:
        nonlocal changed
        whole, fraction = match.group(1), match.group(2) or ""
        if not fraction and (_is_year(whole) or _MONTH.search(match.string, 0, match.start())):
            return match.group(0)  # a year or a day of a date, not an amount
        value = float(whole.replace(",", "") + fraction)
        decimals = len(fraction) - 1 if fraction else 0
        new = value * rng.choice(_FACTORS)
        if value == 0:
            new = float(rng.choice((3, 7, 12)))
        out = f"{new:,.{decimals}f}" if "," in whole else f"{new:.{decimals}f}"
        if float(out.replace(",", "")) == value:  # too small to move at this precision
            out = f"{value + 10 ** -decimals * rng.choice((3, 7)):.{decimals}f}"
        changed = True
        return out

    out = _NUMBER.sub(scale, text)
    return out if changed and out != text else None


def _gold_text(question: Question) -> str | None:
    variants = question.answer_variants
    if not variants:
        return None
    parts = answer_parts(variants[0])
    return ", ".join(parts) if parts else None


def _asked(question: Question, answer, scorer: ANLSScorer) -> bool:
    """Whether MADQA's two-stage scoring would send `answer` to the judge (not decided by its first stage)."""
    variants = question.answer_variants
    _, source = semantic_score(question.question, variants, answer, exact=exact_match(answer, variants),
                               anls=scorer(answer, variants), judge=lambda *_: "incorrect")
    return source == "judge"


def answer_items(questions: Sequence[Question], predictions) -> tuple[list[dict], int]:
    """A run's answers to the numeric-gold questions among `questions`, labelled by the numeric scorer.

    Returns:
        (items of kind "answer", human "correct" when the answer holds the gold number within 1 %, else
        "incorrect"; how many such answers the first stage decided and were left out).
    """
    scorer = ANLSScorer()
    by_id = {p.id: p for p in predictions}
    items, dropped = [], 0
    for question in questions:
        prediction = by_id.get(question.id)
        if prediction is None or not numeric_gold(question):
            continue
        answer = prediction.answer
        if not _asked(question, answer, scorer):
            dropped += 1
            continue
        right = numeric_correct(answer, question.answer_variants, question.question)
        items.append({"id": f"{question.id}:answer", "kind": "answer", "question": question.question,
                      "gold": [list(v) for v in question.answer_variants], "answer": answer,
                      "human": "correct" if right else "incorrect"})
    return items, dropped


def known_verdict_items(questions: Sequence[Question], seed: int = 0) -> tuple[list[dict], dict[str, int]]:
    """The calibration items of `questions` that the judge would be asked about, and how many the first stage took.

    Returns:
        (items, dropped): items are {"id", "kind", "question", "gold", "answer", "human"} with human
        "correct" for kind gold and "incorrect" otherwise; dropped counts, per kind, the items MADQA's
        first stage decides without the judge (an exact match, a recognised refusal), which are left out.
    """
    rng = random.Random(seed)
    scorer = ANLSScorer()
    golds = [_gold_text(q) for q in questions]
    usable = [i for i, g in enumerate(golds) if g]
    items: list[dict] = []
    dropped = dict.fromkeys(KINDS[:4], 0)
    for position, index in enumerate(usable):
        question, gold = questions[index], golds[index]
        template = _TEMPLATES[position % len(_TEMPLATES)]
        candidates = [("gold", template.format(gold))]
        perturbed = None if _YES_NO.match(gold) else perturb_numbers(gold, rng)
        if perturbed is not None:
            candidates.append(("perturbed", template.format(perturbed)))
        others = [j for j in usable if j != index and golds[j].lower() != gold.lower() and not _YES_NO.match(golds[j])]
        if others:
            candidates.append(("other", template.format(golds[rng.choice(others)])))
        candidates.append(("refusal", _REFUSALS[position % len(_REFUSALS)]))
        for kind, answer in candidates:
            if not _asked(question, answer, scorer):
                dropped[kind] += 1
                continue
            items.append({"id": f"{question.id}:{kind}", "kind": kind, "question": question.question,
                          "gold": [list(v) for v in question.answer_variants], "answer": answer,
                          "human": "correct" if kind == "gold" else "incorrect"})
    return items, dropped
