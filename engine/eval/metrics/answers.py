"""Answer shapes and normalisation shared by every answer metric.

A predicted answer is `str | list[str] | None` (canonical prediction format); a gold
answer is a list of variants, each a list of parts (a list answer has several parts).
Everything here is pure and cheap: it runs once per item on 10,000-item runs.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "answer_parts",
    "is_empty_answer",
    "normalize_for_match",
    "exact_match",
    "is_refusal",
    "levenshtein",
    "levenshtein_within",
]

_EDGE_PUNCT = " \t\n.,;:!?\"'`"
_WS = re.compile(r"\s+")

# Phrases that mean "I did not answer". MADQA's taxonomy counts these as No Answer / Refusal.
# Only applied to wrong answers, so a correct "N/A" stays correct.
_REFUSAL = re.compile(
    r"^\s*(?:unknown|n/?a|none|no answer|not (?:found|available|applicable))\s*\.?\s*$"
    r"|\bi (?:cannot|can't|could not|couldn't|am unable|was unable|do not know|don't know)\b"
    r"|\bunable to (?:find|determine|answer|locate|identify)\b"
    r"|\b(?:not|insufficient|no) (?:enough |sufficient )?information\b"
    r"|\bcannot be (?:determined|found|answered)\b"
    r"|\bnot (?:found|provided|mentioned|specified|stated) in\b"
    r"|\bmaximum iterations reached\b",  # what the agents record when they never answered
    re.IGNORECASE,
)


def answer_parts(answer: str | list[str] | None) -> list[str]:
    """The answer as a list of parts: None -> [], "x" -> ["x"], ["a", "b"] -> ["a", "b"]."""
    if answer is None:
        return []
    if isinstance(answer, str):
        return [answer]
    return [str(part) for part in answer]


def is_empty_answer(answer: str | list[str] | None) -> bool:
    """True for None, "", [] and lists whose parts are all blank (MADQA's harness: score 0, no judge)."""
    return all(not part.strip() for part in answer_parts(answer))


def normalize_for_match(text: str) -> str:
    """Normalise one answer part for exact match.

    NFKC (full-width digits, ligatures), case-folded, whitespace collapsed, and surrounding
    whitespace and sentence punctuation stripped: " $1,577. " and "$1,577" are equal.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    return _WS.sub(" ", text).strip(_EDGE_PUNCT)


def exact_match(answer: str | list[str] | None, gold_variants: list[list[str]]) -> bool:
    """Exact match after normalisation against any gold variant, position by position.

    MADQA's Stage 1: the predicted list must equal a gold alternative in all positions.
    An empty answer never matches, even an empty variant.
    """
    if is_empty_answer(answer):
        return False
    predicted = [normalize_for_match(p) for p in answer_parts(answer)]
    return any(predicted == [normalize_for_match(g) for g in variant] for variant in gold_variants)


def is_refusal(answer: str | list[str] | None) -> bool:
    """True when the answer is empty or says the system could not answer."""
    if is_empty_answer(answer):
        return True
    return any(_REFUSAL.search(part) for part in answer_parts(answer))


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions cost 1), O(len(a) * len(b))."""
    return _edit_distance(a, b, None)


def levenshtein_within(a: str, b: str, limit: int) -> int | None:
    """The edit distance when it is at most `limit`, else None; stops as soon as `limit` is exceeded.

    Every cell of a DP row is a lower bound on the final distance once the row is complete, so
    a row whose minimum exceeds `limit` ends the search (cost O(limit * len) for far strings).
    """
    if abs(len(a) - len(b)) > limit:
        return None
    distance = _edit_distance(a, b, limit)
    return distance if distance is not None and distance <= limit else None


def _edit_distance(a: str, b: str, limit: int | None) -> int | None:
    """The row-by-row DP of both: with a `limit`, None as soon as a whole row exceeds it."""
    if len(a) > len(b):
        a, b = b, a
    previous = list(range(len(a) + 1))
    for j, char_b in enumerate(b, start=1):
        current = [j]
        for i, char_a in enumerate(a, start=1):
            cost = 0 if char_a == char_b else 1
            current.append(min(previous[i] + 1, current[i - 1] + 1, previous[i - 1] + cost))
        if limit is not None and min(current) > limit:
            return None
        previous = current
    return previous[-1]
