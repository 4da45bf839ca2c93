"""A straight transcription of MADQA's published evaluation formulas, for parity tests.

Written from the paper (Section 3) and the harness's `eval/metrics.py` (OxRML/MADQA) as
they stand, quirks included: pages are compared as given (so "1" never matches 1), the sort
by effort is stable (ties keep input order) and D is taken at every k. Tests compare
`engine.eval` against these functions; nothing in `engine/` imports this file.
"""

from __future__ import annotations

import numpy as np
from anls_star import anls_score


def anls_star(predicted, gold_variants) -> float:
    """Max ANLS* over variants, both sides lower-cased; the harness passes (prediction, gold)."""
    if not gold_variants:
        return 0.0
    if predicted is None:
        predicted = []
    if isinstance(predicted, str):
        predicted = [predicted]
    if not predicted:
        return 0.0
    lowered = [str(p).lower() for p in predicted]
    best = 0.0
    for variant in gold_variants:
        variant = [variant] if isinstance(variant, str) else variant
        best = max(best, anls_score(lowered, [str(g).lower() for g in variant]))
    return best


def citation_f1(cited: list[dict], gold: list[dict], level: str) -> float:
    """F1 over sets of documents or (document, page) tuples, values compared as given."""
    if not gold:
        return 0.0
    if level == "document":
        gold_set = {g["document"] for g in gold if g.get("document")}
        cited_set = {c.get("file") or c.get("document") for c in cited if c.get("file") or c.get("document")}
    else:
        gold_set = {(g["document"], g.get("page")) for g in gold if g.get("document") is not None}
        cited_set = {(c.get("file") or c.get("document"), c.get("page")) for c in cited
                     if (c.get("file") or c.get("document")) is not None}
    if not gold_set:
        return 0.0
    hits = len(gold_set & cited_set)
    precision = hits / len(cited_set) if cited_set else 0.0
    recall = hits / len(gold_set)
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def effort(prediction: dict) -> int:
    history = prediction.get("search_history") or []
    return len(history) if history else (prediction.get("iterations") or 0)


def kuiper(efforts, correct) -> float | None:
    """K = max D - min D over the stable effort order; None when degenerate."""
    kept = [(e, c) for e, c in zip(efforts, correct) if e > 0]
    if not kept:
        return None
    kept.sort(key=lambda pair: pair[0])  # stable: ties keep input order
    y = np.array([1 if c else 0 for _, c in kept], dtype=float)
    mean = y.mean()
    if mean in (0.0, 1.0):
        return None
    path = np.cumsum(y - mean)
    return float(path.max() - path.min())


def evaluate(questions: list[dict], predictions: list[dict]) -> dict:
    """Accuracy (ANLS* >= 0.5), Page F1, Doc F1 and Kuiper over matched items, the harness's way."""
    gold_by_id = {q["id"]: q for q in questions}
    rows = []
    for prediction in predictions:
        gold = gold_by_id[prediction["id"]]
        score = anls_star(prediction.get("answer"), gold["answer_variants"])
        rows.append({
            "correct": score >= 0.5,
            "page_f1": citation_f1(prediction.get("citations") or [], gold["evidence"], "page"),
            "doc_f1": citation_f1(prediction.get("citations") or [], gold["evidence"], "document"),
            "steps": effort(prediction),
        })
    n = len(rows)
    return {
        "accuracy": sum(r["correct"] for r in rows) / n,
        "page_f1": sum(r["page_f1"] for r in rows) / n,
        "doc_f1": sum(r["doc_f1"] for r in rows) / n,
        "kuiper": kuiper([r["steps"] for r in rows], [r["correct"] for r in rows]),
    }
