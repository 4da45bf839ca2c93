"""MADQA's error taxonomy, decided from citations alone (Section 5.1, Appendix H.3).

Each item falls in exactly one class, checked in this order:
  correct                the answer is correct;
  refusal                no prediction, an empty answer, or an answer that declines;
  retrieval_failure      no gold document is cited;
  navigation_failure     a gold document is cited but none of its gold pages;
  comprehension_failure  a gold page is cited, yet the answer is wrong.
A wrong answer to a question with no gold evidence cannot be placed and is `unclassified`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from engine.datasets.formats import Evidence
from engine.eval.metrics.answers import is_refusal

__all__ = ["TAXONOMY", "classify_error", "taxonomy_summary"]

TAXONOMY = (
    "correct",
    "retrieval_failure",
    "navigation_failure",
    "comprehension_failure",
    "refusal",
    "unclassified",
)


def classify_error(
    correct: bool,
    answer: str | list[str] | None,
    citations: Iterable[Evidence],
    evidence: Iterable[Evidence],
    has_prediction: bool = True,
) -> str:
    """The taxonomy class of one item.

    Args:
        correct: whether the item counts as answered correctly.
        answer: the predicted answer (None when there is no prediction).
        citations: the pages the prediction cites.
        evidence: the gold evidence pages.
        has_prediction: False when the gold item has no prediction at all.
    """
    if correct:
        return "correct"
    if not has_prediction or is_refusal(answer):
        return "refusal"
    gold = list(evidence)
    if not gold:
        return "unclassified"
    cited = list(citations)
    gold_docs = {e.document for e in gold}
    if not any(c.document in gold_docs for c in cited):
        return "retrieval_failure"
    gold_pages = {(e.document, e.page) for e in gold}
    if not any((c.document, c.page) in gold_pages for c in cited):
        return "navigation_failure"
    return "comprehension_failure"


def taxonomy_summary(classes: Iterable[str]) -> dict:
    """Counts and shares of every class, plus each error class's share of the errors.

    Returns:
        {"counts": {...}, "shares": {...}, "error_shares": {...}, "n": N, "errors": E};
        shares are of all items, error_shares of the wrong ones (MADQA's Table 17 form).
    """
    counts = Counter(classes)
    n = sum(counts.values())
    errors = n - counts.get("correct", 0)
    return {
        "counts": {name: counts.get(name, 0) for name in TAXONOMY},
        "shares": {name: (counts.get(name, 0) / n if n else 0.0) for name in TAXONOMY},
        "error_shares": {
            name: (counts.get(name, 0) / errors if errors else 0.0) for name in TAXONOMY if name != "correct"
        },
        "n": n,
        "errors": errors,
    }
