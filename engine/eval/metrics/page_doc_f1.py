"""Evidence attribution: Page F1, Doc F1 and hop type, as MADQA defines them (Section 3.2).

Per item, R is the set of unique cited pages (document, page) — or documents for Doc F1 —
and G the gold evidence set; P = |R ∩ G| / |R|, R = |R ∩ G| / |G|, F1 their harmonic mean.
Edge cases as in MADQA's harness: nothing cited -> 0; empty gold -> 0; P + R = 0 -> 0.

Pages are integers here: `engine.datasets.formats.parse_page` turns "1" into 1 when files
are read, so a citation of page "1" matches gold page 1. MADQA's harness compares the
values as given and silently scores that pair as a miss.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.datasets.formats import Evidence

__all__ = ["PRF", "page_prf", "doc_prf", "hop_type", "HOP_TYPES"]

HOP_TYPES = ("single", "cross_page", "cross_doc")


@dataclass(slots=True, frozen=True)
class PRF:
    """Precision, recall and F1 of one item's citations."""

    precision: float
    recall: float
    f1: float


def _prf(cited: set, gold: set) -> PRF:
    if not gold or not cited:
        return PRF(0.0, 0.0, 0.0)
    hits = len(cited & gold)
    precision = hits / len(cited)
    recall = hits / len(gold)
    if precision + recall == 0:
        return PRF(precision, recall, 0.0)
    return PRF(precision, recall, 2 * precision * recall / (precision + recall))


def page_prf(citations: Iterable[Evidence], evidence: Iterable[Evidence]) -> PRF:
    """Page-level precision/recall/F1 of cited (document, page) pairs against gold pages."""
    return _prf({(c.document, c.page) for c in citations}, {(e.document, e.page) for e in evidence})


def doc_prf(citations: Iterable[Evidence], evidence: Iterable[Evidence]) -> PRF:
    """Document-level precision/recall/F1: only which documents were cited counts."""
    return _prf({c.document for c in citations if c.document}, {e.document for e in evidence if e.document})


def hop_type(evidence: Iterable[Evidence]) -> str:
    """MADQA's hop type from the gold evidence.

    Returns:
        "cross_doc" when the evidence spans several documents, "cross_page" when it spans
        several pages of one document, otherwise "single" (also for empty evidence, as in
        MADQA's harness).
    """
    evidence = list(evidence)
    if len({e.document for e in evidence}) > 1:
        return "cross_doc"
    if len({(e.document, e.page) for e in evidence}) > 1:
        return "cross_page"
    return "single"
