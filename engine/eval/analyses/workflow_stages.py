"""MuDABench's per-stage error taxonomy for workflow runs: which stage first went wrong on a wrong answer.

MuDABench's error analysis (section 5.3) attributes failures to planning, information
extraction, normalisation, code and missing domain knowledge. Here the attribution is
deterministic, from the prediction's workflow record (`extra["workflow"]`, written by
engine/agents/workflow/episode.py) and the question's gold rows, walking the stages in order and
blaming the first whose output is wrong:

  planning      no plan, or the plan's documents differ from the gold documents
  knowledge     the right documents, but the plan asks for other facts than the gold ones (none
                of a gold fact's words in the plan's field names or templates: the model did not
                know which quantity the question needs)
  extraction    a gold document's sub-questions gave no answer, or its record holds a number that
                is not the gold value at any scale (thousand, million, ...) or a wrong category
  structuring   the document's record failed (a wrong type twice), or the printed number was
                right but the converted value is not (scale, unit or currency)
  code          every record right, but the program failed or printed a wrong answer
  answer        the program printed the right answer, but the final-answer turn did not keep it

Items without a workflow record (other agents) are "unattributed"; correct items are not
counted. Numbers compare under MuDABench's tolerance (integer digits and first decimal).
"""

from __future__ import annotations

import re
from decimal import Decimal

from engine.eval.metrics.mudabench import mudabench_answer_correct, numeric_match, rows_from_metadata

__all__ = ["STAGES", "stage_error", "stage_taxonomy", "section"]

STAGES = ("planning", "knowledge", "extraction", "structuring", "code", "answer")
_UNIT_WORDS = {"usd", "cny", "eur", "gbp", "jpy", "million", "millions", "thousand", "thousands", "billion", "pct",
               "percent", "count", "value", "total", "of", "the", "and", "in", "what", "was", "is", "a"}
_SCALES = [Decimal(10) ** k for k in (-9, -8, -6, -4, -3, 0, 3, 4, 6, 8, 9)]


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", str(text).lower()) if w and w not in _UNIT_WORDS}


def _decimal(text: object) -> Decimal | None:
    text = str(text).strip()
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


def _field_for(gold_name: str, fields: list[dict]) -> dict | None:
    """The plan field a gold column is about: the one sharing most words with its name (ties: the first)."""
    words = _words(gold_name)
    scored = [(len(words & _words(f.get("name", ""))), i) for i, f in enumerate(fields)]
    best = max(scored, default=(0, -1))
    return fields[best[1]] if best[0] else (fields[0] if len(fields) == 1 else None)


def _row_stage(row: dict, record: dict | None, raw: dict | None, fields: list[dict]) -> str | None:
    for name, gold in row["values"].items():
        spec = _field_for(name, fields)
        if spec is None:
            continue
        value = (record or {}).get(spec["name"])
        if isinstance(gold, (int, float)) and not isinstance(gold, bool):
            printed = ((raw or {}).get(spec["name"]) or {})
            number = _decimal(printed.get("value")) if isinstance(printed, dict) else None
            g = Decimal(str(gold))
            if number is None or not any(numeric_match(number * s, g) for s in _SCALES):
                return "extraction"
            if value is None or not numeric_match(Decimal(str(value)), g):
                return "structuring"
        elif str(value).strip().casefold() != str(gold).strip().casefold():
            return "extraction"
    return None


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
    fields = [f for f in plan.get("fields") or [] if isinstance(f, dict)]
    asked = _words(" ".join([f.get("name", "") for f in fields] + [t.get("subquery", "")
                                                                 for t in plan.get("templates") or []]))
    gold_words = [_words(name) for r in rows for name in r["values"]]
    if gold_words and not all(w & asked for w in gold_words):
        return "knowledge"
    records = {r["document"]: r for r in flow.get("records") or []}
    raw = flow.get("raw_records") or {}
    failed = {d["document"]: d["stage"] for d in flow.get("failed_documents") or []}
    for row in rows:
        document = str(row["document"])
        if document not in records:
            return "structuring" if failed.get(document) == "structuring" else "extraction"
        stage = _row_stage(row, records[document], raw.get(document), fields)
        if stage:
            return stage
    if failure.get("stage") in ("extraction", "structuring", "answer"):
        return failure["stage"]
    printed = [(c.get("result") or {}).get("stdout") for c in flow.get("code") or []]
    if printed and printed[-1] and mudabench_answer_correct(printed[-1], question.answer_variants):
        return "answer"
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


def section(inputs) -> dict | None:
    """The registered report section (engine/eval/sections.py): which workflow stage failed first, judged with the
    MuDABench verdict (its LLM judge's under `--judge`); None when no prediction holds a workflow record."""
    return stage_taxonomy([(question, prediction, item.scores["mudabench"])
                           for (question, prediction), item in zip(inputs.pairs, inputs.items)])
