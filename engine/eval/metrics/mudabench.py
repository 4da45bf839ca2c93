"""MuDABench: numeric tolerance, final-answer scoring and intermediate-fact coverage.

Tolerance (every MuDABench judge prompt): a number is right when its integer digits and its
first decimal place are right — 12.34 and 12.3 match 12.31; 12.4 does not. Compared as
decimals truncated to one place (no float rounding surprises).

Coverage (MuDABench's `eval/evaluate.py`, document-wise metric-only judge): every gold source
row belongs to one document; the system's dialog with that document is judged column by column
against the row's metric columns ("values.*" and "details.*"). Per question and summed over
questions:
  cell accuracy   = correct metric cells / metric cells;
  row accuracy    = rows with every metric column correct / rows;
  column accuracy = columns correct in every row they appear in / distinct columns.

Record shapes (canonical files carry them as extra fields):
  question["source_rows"] = [{"row_index": 0, "document": "doc-17", "values": {...}, "details": {...}}, ...]
    or, as `dossier import mudabench` keeps them, MuDABench's own question["metadata"] rows
    ({"id": "doc-17", "value_revenue": ..., "detail_unit": ...}), converted by `rows_from_metadata`;
  prediction["document_dialogs"] = {"doc-17": "Q: ...\\nA: ..." | [{"prompt": ..., "answer": ...}, ...]}
A row judge is any callable (question, row, metric_columns, dialog) -> iterable of correct field
names; `tolerance_row_judge` is the deterministic one used without an LLM.

The paper's judges (appendix A.7, paraphrased) are the LLM option: `CompletionAnswerJudge` for the
final answer (A.7.10) here, and the document-wise row judge for coverage (A.7.7) in
engine/eval/llm_judge.py. `dossier eval --judge MODEL` runs both; the report's "mudabench_scoring"
names the scorer of each figure.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from decimal import ROUND_DOWN, Context, Decimal, InvalidOperation

__all__ = [
    "numeric_match",
    "extract_numbers",
    "mudabench_answer_correct",
    "item_verdict",
    "metric_columns",
    "rows_from_metadata",
    "dialog_text",
    "tolerance_row_judge",
    "coverage_for_question",
    "combine_coverage",
    "FINAL_ANSWER_PROMPT",
    "FINAL_ANSWER_SCHEMA",
    "TOLERANCE_SCORER",
    "build_final_answer_prompt",
    "parse_final_answer",
    "CompletionAnswerJudge",
]

_NUMBER = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_EXCLUDED_DETAILS = {"aligned_from_span", "span_role", "source_span_years", "source_span_fact_type",
                     "paired_year", "year_source"}  # bookkeeping fields MuDABench never scores
RowJudge = Callable[[str, dict, dict, str], Iterable[str]]


def extract_numbers(text: str) -> list[Decimal]:
    """Every number in the text, thousands separators removed ("1,234.5" -> 1234.5)."""
    found = []
    for token in _NUMBER.findall(text):
        try:
            found.append(Decimal(token.replace(",", "").replace("−", "-")))
        except InvalidOperation:  # pragma: no cover - the pattern only matches valid numbers
            continue
    return found


def _one_decimal(value: Decimal) -> Decimal:
    # Enough precision for any integer part: a model may write a 40-digit "number", which the default
    # 28-digit context cannot quantize (InvalidOperation would end the whole evaluation).
    context = Context(prec=max(28, value.adjusted() + 3))
    return value.quantize(Decimal("0.1"), rounding=ROUND_DOWN, context=context)


def numeric_match(predicted: str | float | Decimal, gold: str | float | Decimal) -> bool:
    """MuDABench tolerance: same sign, same integer digits and same first decimal place.

    Strings are read by their first number; False when either side holds none.
    """
    def first(value) -> Decimal | None:
        if isinstance(value, Decimal):
            return value
        if isinstance(value, (int, float)):
            return Decimal(str(value))
        numbers = extract_numbers(str(value))
        return numbers[0] if numbers else None

    p, g = first(predicted), first(gold)
    if p is None or g is None:
        return False
    return _one_decimal(p) == _one_decimal(g)


def _value_found(expected: object, text: str) -> bool:
    if isinstance(expected, bool) or expected is None:
        return str(expected).lower() in text.lower()
    if isinstance(expected, (int, float)):
        return any(numeric_match(n, expected) for n in extract_numbers(text))
    expected_text = str(expected).strip()
    gold_numbers = extract_numbers(expected_text)
    if gold_numbers and _NUMBER.fullmatch(expected_text.replace(" ", "").rstrip("%")):
        return any(numeric_match(n, gold_numbers[0]) for n in extract_numbers(text))
    return bool(expected_text) and expected_text.casefold() in text.casefold()


def mudabench_answer_correct(answer: str | list[str] | None, gold_variants: list[list[str]]) -> bool:
    """Deterministic reading of MuDABench's final-answer rule: the answer holds every key fact of
    some gold variant — numbers under the tolerance, text as a case-insensitive substring."""
    if answer is None:
        return False
    text = " ".join(answer) if isinstance(answer, list) else str(answer)
    if not text.strip():
        return False
    return any(variant and all(_value_found(part, text) for part in variant) for variant in gold_variants)


_DOC_ID_KEYS = ("chatdoc_upload_id", "doc_id", "document_id", "toBid", "id")  # MuDABench's order of preference


def rows_from_metadata(metadata: list) -> list[dict]:
    """MuDABench's atomic metadata rows as source rows: value_<k> -> values[k], detail_<k> -> details[k].

    Rows without any value_/detail_ field carry no scorable fact and are skipped (MuDABench
    scores such questions another way).
    """
    rows = []
    for index, meta in enumerate(metadata or []):
        if not isinstance(meta, dict):
            continue
        values = {k[len("value_"):]: v for k, v in meta.items() if isinstance(k, str) and k.startswith("value_")}
        details = {k[len("detail_"):]: v for k, v in meta.items() if isinstance(k, str) and k.startswith("detail_")}
        if not values and not details:
            continue
        document = next((str(meta[k]) for k in _DOC_ID_KEYS if meta.get(k) is not None), None)
        rows.append({"row_index": index, "document": document, "symbol": meta.get("symbol"),
                     "year": meta.get("year"), "values": values, "details": details})
    return rows


def metric_columns(row: dict) -> dict[str, object]:
    """The row's scorable columns: "values.<k>" and "details.<k>" (MuDABench's naming)."""
    columns = {f"values.{k}": v for k, v in sorted((row.get("values") or {}).items())}
    columns.update({f"details.{k}": v for k, v in sorted((row.get("details") or {}).items())
                    if k not in _EXCLUDED_DETAILS})
    if not columns and row.get("fact_type") is not None:
        columns["fact_type"] = row["fact_type"]
    return columns


def dialog_text(dialog: object) -> str:
    """A document dialog as text: strings as they are, [{prompt, answer}] as Q:/A: lines."""
    if dialog is None:
        return ""
    if isinstance(dialog, str):
        return dialog
    if isinstance(dialog, list):
        lines = []
        for turn in dialog:
            if isinstance(turn, dict):
                lines.append(f"Q: {turn.get('prompt', turn.get('question', ''))}\nA: {turn.get('answer', '')}")
            else:
                lines.append(str(turn))
        return "\n".join(lines)
    return json.dumps(dialog, ensure_ascii=False)


def tolerance_row_judge(question: str, row: dict, columns: dict, dialog: str) -> list[str]:
    """Columns whose expected value appears in the dialog (numbers under MuDABench's tolerance)."""
    return [field for field, expected in columns.items() if _value_found(expected, dialog)]


def coverage_for_question(question: str, rows: list[dict], dialogs: dict | None, judge: RowJudge) -> dict:
    """Row, cell and column counts for one question.

    Args:
        question: the question text (passed to the judge).
        rows: the gold source rows, each with its "document".
        dialogs: document id -> that document's dialog; a row whose document has none is all wrong. None: the
            agent keeps no per-document records (rag, bm25), so coverage is not measured: the totals are
            counted and every "_correct" is None ("–" in a table, not 0/N).
        judge: the row judge.
    """
    if dialogs is None:
        columns = [metric_columns(row) for row in rows]
        return {"row_correct": None, "row_total": len(rows), "cell_correct": None,
                "cell_total": sum(len(c) for c in columns), "column_correct": None,
                "column_total": len({field for c in columns for field in c}), "records": False}
    row_correct = cell_correct = cell_total = 0
    column_stats: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # field -> [correct, total]
    for row in rows:
        columns = metric_columns(row)
        dialog = dialog_text(dialogs.get(str(row.get("document")))) if dialogs else ""
        judged = set(judge(question, row, columns, dialog)) if dialog.strip() else set()
        correct_fields = judged & set(columns)
        cell_correct += len(correct_fields)
        cell_total += len(columns)
        row_correct += bool(columns) and len(correct_fields) == len(columns)
        for field in columns:
            column_stats[field][1] += 1
            column_stats[field][0] += field in correct_fields
    return {
        "row_correct": row_correct, "row_total": len(rows),
        "cell_correct": cell_correct, "cell_total": cell_total,
        "column_correct": sum(1 for c, t in column_stats.values() if t and c == t),
        "column_total": len(column_stats),
    }


def combine_coverage(per_question: list[dict]) -> dict:
    """Sum counts over questions (MuDABench's micro average) and turn them into accuracies.

    When no question has records (`coverage_for_question` with dialogs None), every "_correct" and
    "_accuracy" is None and "records" is False: an agent that keeps no records has no coverage to report.
    A question without records in a run that keeps them elsewhere counts as all wrong.
    """
    kept = any(q.get("records", True) for q in per_question)
    summed = {key: sum(q[key] or 0 for q in per_question) if kept or key.endswith("_total") else None for key in
              ("row_correct", "row_total", "cell_correct", "cell_total", "column_correct", "column_total")}
    for level in ("row", "cell", "column"):
        total = summed[f"{level}_total"]
        summed[f"{level}_accuracy"] = summed[f"{level}_correct"] / total if total and kept else None
    summed["questions"] = len(per_question)
    if not kept:
        summed["records"] = False
    return summed


# --- MuDABench's LLM judges (its appendix A.7, in our own words) -------------------------------------------------
# The final-answer judge (A.7.10). The coverage judge (A.7.7, document-wise and metric-only) is
# engine/eval/llm_judge.py's row judge; both run when `dossier eval --judge MODEL` is given, and the
# report's "mudabench_scoring" says which scorer produced each MuDABench figure.

FINAL_ANSWER_PROMPT = """You judge a system's answer to a question that needs facts from many documents.

Question: {question}
Reference answer: {reference}
The system's answer: {answer}

Rules: the answer is correct when it contains the key information of the reference answer. It is incorrect
when that key information is missing, when it disagrees with the reference, or when there is no answer. A number
is correct when its integer digits and its first decimal place agree with the reference. Extra information
beyond the reference, or another language, does not make an answer incorrect.

Reply with JSON only: {{"is_correct": true}} or {{"is_correct": false}}."""

FINAL_ANSWER_SCHEMA = {"type": "object", "properties": {"is_correct": {"type": "boolean"}},
                       "required": ["is_correct"]}
TOLERANCE_SCORER = "rule-based tolerance (key facts present; numbers by integer digits and first decimal)"


def build_final_answer_prompt(question: str, gold_variants: list[list[str]], answer: str | list[str] | None) -> str:
    """MuDABench's final-answer judge prompt for one question (the reference: the gold variants joined)."""
    reference = " | ".join(", ".join(v) for v in gold_variants if v) or "(none)"
    shown = ", ".join(answer) if isinstance(answer, list) else (answer or "(no answer)")
    return FINAL_ANSWER_PROMPT.format(question=question, reference=reference, answer=shown)


def parse_final_answer(reply: str) -> bool | None:
    """The judge's verdict: True, False, or None when the reply holds no {"is_correct": bool}."""
    match = re.search(r"\{.*\}", reply or "", re.DOTALL)
    if not match:
        return None
    try:
        parsed = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    value = parsed.get("is_correct") if isinstance(parsed, dict) else None
    return value if isinstance(value, bool) else None


class CompletionAnswerJudge:
    """MuDABench's final-answer judge on a completion function (prompt -> reply).

    An empty answer is incorrect without a call; a reply without a verdict is retried `retries`
    times, then counted incorrect (and in `unparsed`).
    """

    def __init__(self, complete: Callable[[str], str], label: str = "LLM judge", retries: int = 1) -> None:
        self.complete, self.label, self.retries = complete, label, retries
        self.unparsed = 0
        self.judged = 0

    def __call__(self, question: str, gold_variants: list[list[str]], answer: str | list[str] | None) -> bool:
        text = " ".join(answer) if isinstance(answer, list) else (answer or "")
        if not text.strip():
            return False
        prompt = build_final_answer_prompt(question, gold_variants, answer)
        self.judged += 1
        for _ in range(self.retries + 1):
            verdict = parse_final_answer(self.complete(prompt))
            if verdict is not None:
                return verdict
        self.unparsed += 1
        return False


def item_verdict(question, prediction, options=None) -> bool:
    """The registered scorer (engine/eval/scorers.py): the rule-based final-answer verdict. `dossier eval --judge`
    replaces it with MuDABench's LLM judge afterwards (EvalConfig.mudabench_judge, engine/eval/evaluate.py)."""
    return mudabench_answer_correct(prediction.answer if prediction is not None else None, question.answer_variants)
