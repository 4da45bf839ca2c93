"""MuDABench's per-stage error taxonomy for workflow runs: which stage first went wrong on a wrong answer.

MuDABench's error analysis (section 5.3) attributes failures to planning, information
extraction, normalisation, code and missing domain knowledge. Here the attribution is
deterministic, from the prediction's workflow record (`extra["workflow"]`, written by
engine/agents/workflow/episode.py) and the question's gold rows, walking the stages in order and
blaming the first whose output is wrong:

  planning       no plan, or the plan's documents differ from the gold documents
  knowledge      the right documents, but the sub-query asks for another fact than the gold one
                 (none of the gold fact's words in the plan's field or sub-query: the model did
                 not know which quantity the question needs)
  extraction     a gold document yielded no record, or a number that is not the gold value at
                 any scale (thousand, million, ...)
  normalisation  the printed number was right but the converted value is not
  code           every record right, but the program failed or printed a wrong answer

Items without a workflow record (other agents) are "unattributed"; correct items are not
counted. Numbers compare under MuDABench's tolerance (integer digits and first decimal).
"""

from __future__ import annotations

import re
from decimal import Decimal

from engine.eval.metrics.mudabench import numeric_match, rows_from_metadata

__all__ = ["STAGES", "stage_error", "stage_taxonomy"]

STAGES = ("planning", "knowledge", "extraction", "normalisation", "code")
_UNIT_WORDS = {"usd", "cny", "eur", "gbp", "jpy", "million", "millions", "thousand", "thousands", "billion", "pct",
               "percent", "count", "value", "total", "of", "the", "and"}
_SCALES = [Decimal(10) ** k for k in (-9, -6, -3, 0, 3, 6, 9)]


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if w and w not in _UNIT_WORDS}


def _printed(record: dict) -> Decimal | None:
    raw = (record or {}).get("raw_value")
    if raw is None:
        return None
    text = str(raw).strip()
    negative = text.startswith("(") and text.endswith(")")
    try:
        value = Decimal(text.strip("()").replace(",", ""))
    except ArithmeticError:
        return None
    return -value if negative else value


def _gold_rows(question) -> list[dict]:
    rows = question.extra.get("source_rows")
    if rows is None and isinstance(question.extra.get("metadata"), list):
        rows = rows_from_metadata(question.extra["metadata"])
    return [r for r in rows or [] if isinstance(r, dict) and r.get("document") and r.get("values")]


def stage_error(question, prediction) -> str:
    """The stage to blame for a wrong workflow answer (call it only for wrong answers)."""
    flow = (prediction.extra.get("workflow") if prediction is not None else None) or None
    if not isinstance(flow, dict):
        return "unattributed"
    failure = flow.get("failure") or {}
    plan = flow.get("plan")
    if failure.get("stage") == "planning" or not plan:
        return "planning"
    rows = _gold_rows(question)
    gold_documents = {str(r["document"]) for r in rows}
    if gold_documents and set(plan.get("documents") or []) != gold_documents:
        return "planning"
    asked = _words(f"{plan.get('field', '')} {plan.get('subquery', '')}")
    gold_words = set().union(*(_words(name) for r in rows for name in r["values"])) if rows else set()
    if gold_words and not gold_words & asked:
        return "knowledge"
    records = {r["document"]: r for r in flow.get("records") or []}
    for row in rows:
        record = records.get(str(row["document"]))
        golds = [Decimal(str(v)) for v in row["values"].values() if isinstance(v, (int, float))]
        if record is None:
            return "extraction"
        printed = _printed(record)
        if golds and (printed is None or not any(numeric_match(printed * s, g) for s in _SCALES for g in golds)):
            return "extraction"
        if golds and not any(numeric_match(Decimal(str(record.get("value"))), g) for g in golds):
            return "normalisation"
    if failure.get("stage") in ("extraction", "normalisation"):
        return failure["stage"]
    return "code"


def stage_taxonomy(pairs: list[tuple[object, object, bool]]) -> dict | None:
    """Counts per stage over (question, prediction, correct) triples; None when no prediction is a workflow one."""
    if not any(p is not None and isinstance(p.extra.get("workflow"), dict) for _, p, _ in pairs):
        return None
    counts = {name: 0 for name in (*STAGES, "unattributed")}
    correct = 0
    for question, prediction, ok in pairs:
        if ok:
            correct += 1
        else:
            counts[stage_error(question, prediction)] += 1
    wrong = len(pairs) - correct
    return {"questions": len(pairs), "correct": correct, "counts": counts,
            "shares_of_errors": {k: (v / wrong if wrong else None) for k, v in counts.items()}}
