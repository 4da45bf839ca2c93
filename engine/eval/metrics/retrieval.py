"""Retrieval quality of a ranked page list against gold evidence pages.

Per question, with the top-k ranked pages R and the gold pages G (documents D(G)):
    page_recall = |R ∩ G| / |G|                     (averaged over questions)
    page_hit    = 1 if R ∩ G ≠ ∅                     ("finds a gold page in the top k")
    doc_recall  = |D(R) ∩ D(G)| / |D(G)|
    doc_hit     = 1 if D(R) ∩ D(G) ≠ ∅
    mrr         = 1 / rank of the first gold page in R (0 when none)
Questions without gold evidence are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["RetrievalScores", "score_ranking", "aggregate"]


@dataclass(slots=True)
class RetrievalScores:
    questions: int = 0  # questions with gold evidence that were scored
    skipped: int = 0  # questions without gold evidence
    page_recall: float = 0.0
    page_hit: float = 0.0
    doc_recall: float = 0.0
    doc_hit: float = 0.0
    mrr: float = 0.0
    per_question: list[dict] = field(default_factory=list)

    def to_json(self, k: int) -> dict:
        return {"k": k, "questions": self.questions, "skipped_without_evidence": self.skipped,
                "page_recall": round(self.page_recall, 4), "page_hit": round(self.page_hit, 4),
                "doc_recall": round(self.doc_recall, 4), "doc_hit": round(self.doc_hit, 4),
                "mrr": round(self.mrr, 4)}


def score_ranking(ranked: Sequence[tuple[str, int]], gold: Iterable[tuple[str, int]]) -> dict:
    """Scores of one ranked list of (document, page) against the gold pages."""
    gold_pages = set(gold)
    gold_docs = {d for d, _ in gold_pages}
    ranked_docs = {d for d, _ in ranked}
    found = gold_pages.intersection(ranked)
    first = next((rank for rank, key in enumerate(ranked, start=1) if key in gold_pages), None)
    return {
        "page_recall": len(found) / len(gold_pages),
        "page_hit": float(bool(found)),
        "doc_recall": len(gold_docs & ranked_docs) / len(gold_docs),
        "doc_hit": float(bool(gold_docs & ranked_docs)),
        "mrr": 1.0 / first if first else 0.0,
    }


def aggregate(rows: Iterable[tuple[str, Sequence[tuple[str, int]], Iterable[tuple[str, int]]]]) -> RetrievalScores:
    """Average `score_ranking` over (question id, ranked pages, gold pages) rows."""
    out = RetrievalScores()
    keys = ("page_recall", "page_hit", "doc_recall", "doc_hit", "mrr")
    sums = dict.fromkeys(keys, 0.0)
    for qid, ranked, gold in rows:
        gold = list(gold)
        if not gold:
            out.skipped += 1
            continue
        scores = score_ranking(ranked, gold)
        for key in keys:
            sums[key] += scores[key]
        out.questions += 1
        out.per_question.append({"id": qid, **scores})
    for key in keys:
        setattr(out, key, sums[key] / out.questions if out.questions else 0.0)
    return out
