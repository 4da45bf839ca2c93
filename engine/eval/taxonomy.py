"""MADQA's error taxonomy, decided from citations alone (Section 5.1, Appendix H.3).

Each item falls in exactly one class, checked in this order:
  correct                the answer is correct (MADQA's "Correct (exact)": concise, as asked);
  correct_verbose        the answer is correct but over-verbose (MADQA's "Correct (verbose)", see below);
  refusal                no prediction, an empty answer, or an answer that declines;
  retrieval_failure      no gold document is cited;
  navigation_failure     a gold document is cited but none of its gold pages;
  comprehension_failure  a gold page is cited, yet the answer is wrong.
A wrong answer to a question with no gold evidence cannot be placed and is `unclassified`.

Correct (verbose). MADQA's judge gives 0.5 ("partial") to a correct answer with unrequested
extra content, and counts it correct; Section 5.1 reports these as "Correct (verbose)" (5 % of
correct predictions). Its judge also gives 0.5 to a format slip (a list written as one comma-joined
string), which is not verbosity. So `is_verbose` says, of a correct item:
  - with the judge's verdict: judged partial *and* the answer has more words than the longest
    accepted answer (a comma-joined list has the list's words, so a format slip stays `correct`);
  - without a judge (correct = ANLS* >= 0.5): not an exact match, and the answer has more than
    twice the words of the longest accepted answer and at least 3 words more. ANLS* >= 0.5 already
    bounds the extra characters, so this catches a short gold answer wrapped in a phrase
    ("member ID GL-20417 on the form" for "GL-20417"), not a different spelling of it.
The longest accepted answer is used so that an answer is verbose only against every accepted form.
Reports written before this class existed have no `correct_verbose` count; readers treat it as 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from engine.datasets.formats import Evidence
from engine.eval.metrics.answers import is_refusal

__all__ = ["TAXONOMY", "CORRECT_CLASSES", "classify_error", "is_verbose", "taxonomy_summary", "word_count"]

TAXONOMY = (
    "correct",
    "correct_verbose",
    "retrieval_failure",
    "navigation_failure",
    "comprehension_failure",
    "refusal",
    "unclassified",
)


CORRECT_CLASSES = ("correct", "correct_verbose")  # the classes of items counted correct

VERBOSE_RATIO = 2.0  # without a judge: more than this many times the longest accepted answer's words...
VERBOSE_EXTRA_WORDS = 3  # ...and at least this many words more


def word_count(answer: str | Sequence[str] | None) -> int:
    """Whitespace-separated words of an answer (a list's items together)."""
    if answer is None:
        return 0
    parts = [answer] if isinstance(answer, str) else list(answer)
    return sum(len(str(part).split()) for part in parts)


def is_verbose(
    answer: str | list[str] | None,
    variants: Sequence[Sequence[str]],
    exact: bool,
    semantic: float | None = None,
    semantic_source: str | None = None,
) -> bool:
    """Whether a correct answer is over-verbose (the module docstring gives the rule and why).

    Args:
        answer: the predicted answer.
        variants: the accepted gold answers.
        exact: whether the answer matched a variant exactly.
        semantic: the judge's score (None without a judge).
        semantic_source: how the score was decided ("judge" when the judge ran).
    """
    if exact or answer is None or not variants:
        return False
    words = word_count(answer)
    longest = max(word_count(v) for v in variants)
    if semantic is not None:
        return semantic_source == "judge" and semantic == 0.5 and words > longest
    return words > VERBOSE_RATIO * longest and words - longest >= VERBOSE_EXTRA_WORDS


def classify_error(
    correct: bool,
    answer: str | list[str] | None,
    citations: Iterable[Evidence],
    evidence: Iterable[Evidence],
    has_prediction: bool = True,
    verbose: bool = False,
) -> str:
    """The taxonomy class of one item.

    Args:
        correct: whether the item counts as answered correctly.
        answer: the predicted answer (None when there is no prediction).
        citations: the pages the prediction cites.
        evidence: the gold evidence pages.
        has_prediction: False when the gold item has no prediction at all.
        verbose: the answer, if correct, is over-verbose (`is_verbose`).
    """
    if correct:
        return "correct_verbose" if verbose else "correct"
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
        shares are of all items, error_shares of the wrong ones (MADQA's Table 17 form);
        "verbose_share" is the share of correct items that are verbose (MADQA: 5 %).
    """
    counts = Counter(classes)
    n = sum(counts.values())
    right = sum(counts.get(name, 0) for name in CORRECT_CLASSES)
    errors = n - right
    return {
        "counts": {name: counts.get(name, 0) for name in TAXONOMY},
        "shares": {name: (counts.get(name, 0) / n if n else 0.0) for name in TAXONOMY},
        "error_shares": {
            name: (counts.get(name, 0) / errors if errors else 0.0)
            for name in TAXONOMY if name not in CORRECT_CLASSES
        },
        "verbose_share": counts.get("correct_verbose", 0) / right if right else None,
        "n": n,
        "errors": errors,
    }
