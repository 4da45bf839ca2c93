"""ANLS* through the official `anls-star` package, the way MADQA's harness applies it.

MADQA scores an answer (a list of strings) against each gold variant (a list of strings)
with ANLS*, lower-casing both sides, and keeps the best variant; `accuracy` is the share of
items with ANLS* >= 0.5. Lists are matched order-free by the package (Hungarian matching):
missing and extra items are both penalised.

Three shortcuts keep 10,000-item runs fast without changing any value:
- when the whitespace-normalised, lower-cased parts equal a variant's as multisets, ANLS* is
  exactly 1 (every matched pair has distance 0 and nothing is unmatched), so the package is
  not called;
- when every (answer part, gold part) pair provably has similarity below the 0.5 threshold,
  every pair scores 0 and so does the item: an edit changes at most one character in and one
  out, so the distance is at least the larger one-sided difference of the two strings'
  character counts. Clearly different answers, most wrong ones, never reach the package's
  pure-Python Levenshtein;
- identical (answer, variants) pairs are scored once per scorer (`ANLSScorer` keeps a cache;
  create one per evaluation).
"""

from __future__ import annotations

from collections import Counter

from anls_star import anls_score
from anls_star.anls_star import ANLSTree

from engine.eval.metrics.answers import answer_parts

__all__ = ["ANLSScorer", "anls_star", "ACCURACY_THRESHOLD"]

ACCURACY_THRESHOLD = 0.5  # MADQA's default: an item is correct when ANLS* >= 0.5
_LEAF_THRESHOLD = ANLSTree.THRESHOLD  # the package zeroes a string pair's similarity below this (0.5)


def _canonical(part: str) -> str:
    # What the package compares: str(x).strip().lower() with whitespace runs collapsed.
    return " ".join(part.strip().lower().split())


def _surely_below_threshold(a: str, b: str, counts_a: Counter, counts_b: Counter) -> bool:
    longest = max(len(a), len(b))
    if longest == 0:
        return False  # two empty strings are identical
    lower_bound = max(sum((counts_a - counts_b).values()), sum((counts_b - counts_a).values()))
    return 1.0 - lower_bound / longest < _LEAF_THRESHOLD


def _surely_zero(predicted: list[str], gold: list[str]) -> bool:
    pred_parts = [(p, Counter(p)) for p in (_canonical(x) for x in predicted)]
    for g in (_canonical(x) for x in gold):
        counts_g = Counter(g)
        if not all(_surely_below_threshold(p, g, counts_p, counts_g) for p, counts_p in pred_parts):
            return False
    return True


class ANLSScorer:
    """Scores answers with ANLS*, max over gold variants, with a per-instance cache.

    Example:
        >>> ANLSScorer()("$1,577", [["$1,577"], ["1577"]])
        1.0
    """

    __slots__ = ("_cache", "package_calls")

    def __init__(self) -> None:
        self._cache: dict[tuple, float] = {}
        self.package_calls = 0  # how many times `anls_star.anls_score` actually ran

    def __call__(self, answer: str | list[str] | None, gold_variants: list[list[str]]) -> float:
        """ANLS* of `answer` against the best of `gold_variants` (0.0 for no answer or no gold).

        Args:
            answer: the predicted answer; a string is a one-part list, None is no answer.
            gold_variants: accepted answers, each a list of parts.

        Returns:
            The score in [0, 1].
        """
        predicted = [part.lower() for part in answer_parts(answer)]
        if not predicted or not gold_variants:
            return 0.0  # MADQA's harness: no answer or no gold scores 0 without calling the package
        key = (tuple(predicted), tuple(tuple(v) for v in gold_variants))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        score = self._score(predicted, gold_variants)
        self._cache[key] = score
        return score

    def _score(self, predicted: list[str], gold_variants: list[list[str]]) -> float:
        predicted_canonical = sorted(_canonical(p) for p in predicted)
        best = 0.0
        for variant in gold_variants:
            gold = [str(g).lower() for g in variant]
            if sorted(_canonical(g) for g in gold) == predicted_canonical:
                return 1.0
            if _surely_zero(predicted, gold):
                continue
            self.package_calls += 1
            best = max(best, float(anls_score(gold, predicted)))
            if best >= 1.0:
                break
        return best


def anls_star(answer: str | list[str] | None, gold_variants: list[list[str]]) -> float:
    """One-off ANLS* (no cache shared across calls); prefer an `ANLSScorer` in loops."""
    return ANLSScorer()(answer, gold_variants)
