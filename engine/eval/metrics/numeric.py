"""Numeric answers scored as numbers: a registered scorer for questions whose gold answer is a number.

ANLS* compares characters, so for a number it rewards digits in common rather than the value: "11.5%" for a
gold 1.9 % scores 0.6, "0.0%" for 101.5 % scores 0.5 and ".70" for 1.73 passes the 0.5 threshold, while
"11,588" for a gold "$11588.00" scores 0 (FinanceBench, issue 50). This scorer reads values instead:

1. A gold answer is numeric when every one of its variants is a single quantity and nothing else:
   an optional sign or parentheses (a negative), a currency ("$", "USD", "€", "£"), digits with
   optional thousands separators and decimals, an optional percent ("%", "percent") and an optional
   scale word ("thousand", "million", "billion", "trillion"; "k", "mn", "bn", "tn"). Only those
   questions are scored; the others get None (not scored), as `Scorer.applies` has it.
2. Every quantity in the answer (a list answer is read whole) is a candidate: "$1,577 million",
   "(143)" = -143, "−2.5 %". A number glued to a word ("FY2018", "10K", "Q2") is not a quantity.
3. Values are compared with a relative tolerance, `RELATIVE_TOLERANCE` (1 % of the gold value;
   exact for a gold 0). Scale words count when both sides have one (the answer's own word, the gold's own
   word, or the unit the question states: "(in USD millions)"); when either side has none, either the
   written numbers or the face values may agree, so "11,588" matches "$11588.00", "1.2 thousand" matches
   1,200, and "$1.577 billion" matches a gold 1577 asked "in USD millions" (and no other gold 1577). A percent against a plain number matches either as written (1.9 % and 1.9)
   or as a fraction (1.9 % and 0.019); two percents compare as percents.
4. The answer is right when some candidate matches some gold variant. An answer that hedges with many
   numbers is favoured by this rule; the scorer reports numbers, not reasoning, and a judge is still
   the reading for text answers.

Run it as any registered scorer: `dossier eval RUN_DIR` shows "numeric (±1 %)" beside ANLS*.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = ["RELATIVE_TOLERANCE", "Quantity", "parse_quantity", "find_quantities", "question_scale",
           "numbers_match", "numeric_correct", "numeric_gold", "item_verdict"]

RELATIVE_TOLERANCE = Decimal("0.01")  # |answer - gold| <= 1 % of |gold|: rounding to three significant digits passes

_SCALES = {"thousand": 10**3, "thousands": 10**3, "k": 10**3, "million": 10**6, "millions": 10**6, "mn": 10**6,
           "mm": 10**6, "m": 10**6, "billion": 10**9, "billions": 10**9, "bn": 10**9, "b": 10**9,
           "trillion": 10**12, "trillions": 10**12, "tn": 10**12}
_QUANTITY = r"""
    (?<![\w.,])                                    # not glued to a word or another number: FY2018, 3M_2018_10K
    (?P<open>\(\s*)?
    (?P<sign>[-+−])?\s*
    (?:US\$|USD\s?|\$|€|£)?\s*
    (?P<sign2>[-+−])?
    (?P<number>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?![.,]?\d)
    (?P<close>\s*\))?
    (?:\s*(?P<percent>%|percent\b|per\s+cent\b))?
    (?:\s*(?P<scale>thousands?|millions?|billions?|trillions?|bn|mn|mm|tn|k|m|b)(?![\w]))?
    (?![\w])
"""
_FIND = re.compile(_QUANTITY, re.VERBOSE | re.IGNORECASE)
_WHOLE = re.compile(r"\s*" + _QUANTITY + r"\s*\.?\s*", re.VERBOSE | re.IGNORECASE)
_QUESTION_UNIT = re.compile(r"\bin\s+(?:USD\s+|US\$\s*|\$\s*)?(thousands|millions|billions|trillions)\b",
                            re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Quantity:
    value: Decimal  # the number as written, signed: "(1,577)" -> -1577
    percent: bool  # written with "%" or "percent"
    scale: int | None  # the scale word's factor ("million" -> 10**6); None when none was written


def _quantity(match: re.Match) -> Quantity | None:
    try:
        value = Decimal(match.group("number").replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the pattern only matches valid numbers
        return None
    negative = (match.group("sign") or match.group("sign2") or "") in ("-", "−")
    if match.group("open") and match.group("close"):  # accounting negative: (143)
        negative = not negative
    scale = match.group("scale")
    return Quantity(-value if negative else value, bool(match.group("percent")),
                    _SCALES[scale.lower()] if scale else None)


def parse_quantity(text: str) -> Quantity | None:
    """The quantity a whole string is ("$11,588.00", "1.9 %", "(2.5) million"), else None."""
    match = _WHOLE.fullmatch(text)
    if not match or (bool(match.group("open")) != bool(match.group("close"))):
        return None
    return _quantity(match)


def find_quantities(text: str) -> list[Quantity]:
    """Every quantity in free text, in order; numbers glued to words (FY2018, 10K) are left out."""
    found = (_quantity(m) for m in _FIND.finditer(text))
    return [q for q in found if q is not None]


def question_scale(question: str) -> int | None:
    """The unit a question asks its number in ("in USD millions" -> 10**6), else None."""
    match = _QUESTION_UNIT.search(question or "")
    return _SCALES[match.group(1).lower()] if match else None


def _close(answer: Decimal, gold: Decimal) -> bool:
    return abs(answer - gold) <= RELATIVE_TOLERANCE * abs(gold)


def numbers_match(answer: Quantity, gold: Quantity, gold_scale: int | None = None) -> bool:
    """Whether an answer's quantity is the gold's within `RELATIVE_TOLERANCE` (rules 3 of the module docstring).

    Args:
        answer: a quantity found in the answer.
        gold: the gold answer's quantity.
        gold_scale: the unit the question states, used when the gold has no scale word of its own.
    """
    scale = gold.scale or gold_scale
    if answer.scale is not None and scale is not None:
        readings = [(answer.value * answer.scale, gold.value * scale)]
    else:  # one side has no unit: as written ("$1,577 million" for 1577), or at face value ("1.2 thousand" for 1200)
        readings = [(answer.value, gold.value), (answer.value * (answer.scale or 1), gold.value * (scale or 1))]
    for a, g in readings:
        if answer.percent == gold.percent:
            if _close(a, g):
                return True
        elif _close(a, g) or (_close(a / 100, g) if answer.percent else _close(a, g / 100)):
            return True  # 1.9 % for a gold 0.019 or for a gold written 1.9 (and the other way round)
    return False


def numeric_gold(question) -> bool:
    """The scorer's `applies`: every gold variant is one part that is a number (rule 1)."""
    variants = question.answer_variants
    return bool(variants) and all(len(v) == 1 and parse_quantity(str(v[0])) is not None for v in variants)


def numeric_correct(answer: str | list[str] | None, gold_variants: list[list[str]], question: str = "") -> bool:
    """True when some quantity in the answer matches some numeric gold variant within the tolerance."""
    if answer is None:
        return False
    text = "; ".join(map(str, answer)) if isinstance(answer, list) else str(answer)
    found = find_quantities(text)
    golds = [q for q in (parse_quantity(str(v[0])) for v in gold_variants if len(v) == 1) if q is not None]
    scale = question_scale(question)
    return any(numbers_match(a, g, scale) for a in found for g in golds)


def item_verdict(question, prediction, options=None) -> bool:
    """The registered scorer (engine/eval/scorers.py): the answer's numbers against a numeric gold answer."""
    return numeric_correct(prediction.answer if prediction is not None else None, question.answer_variants,
                           question.question)
