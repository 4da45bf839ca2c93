"""Convert benchmarks' native question files into the canonical question format.

    madqa         canonical already (JSONL); validated, passed through
    financebench  JSONL; `evidence[].evidence_page_num` is ZERO-indexed, `doc_name` the file stem
    mmlongbench   JSON list (MMLongBench-Doc samples.json); `evidence_pages` is a string "[5, 6]"
    mudabench     JSON list; evidence is document metadata rows, not pages
    docvqa2026    one record per document with its questions (parquet, JSON list or JSONL);
                  see `engine/datasets/docvqa2026.py`

Document ids are PDF file stems (".pdf" is stripped), matching `dossier ingest`.
Malformed items are reported with their line (JSONL) or item number (JSON list) and
skipped, never silently.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.datasets.formats import Evidence, LineError, Question, iter_json_records, parse_page
from tools.errors import DossierError

__all__ = ["IMPORTERS", "KINDS", "import_questions"]


def _stem(name: object) -> str:
    text = str(name).strip()
    return text[:-4] if text.lower().endswith(".pdf") else text


def _madqa(obj: object, where: str) -> Question:
    question = Question.from_json(obj, where)
    question.evidence = [Evidence(_stem(e.document), e.page) for e in question.evidence]
    return question


def _financebench(obj: object, where: str) -> Question:
    if not isinstance(obj, dict):
        raise DossierError(f"{where}: expected a JSON object")
    for key in ("financebench_id", "question", "answer", "doc_name"):
        if key not in obj:
            raise DossierError(f"{where}: missing field {key!r} (is this a FinanceBench file?)")
    evidence = []
    for item in obj.get("evidence") or []:
        if not isinstance(item, dict) or "evidence_page_num" not in item:
            raise DossierError(f"{where}: evidence item without evidence_page_num")
        page = parse_page(int(item["evidence_page_num"]) + 1, where)  # FinanceBench pages are 0-indexed
        evidence.append(Evidence(_stem(item.get("doc_name", obj["doc_name"])), page))
    extra = {k: obj[k] for k in ("company", "question_type", "question_reasoning", "justification", "doc_name")
             if k in obj}
    extra["category"] = obj.get("question_type")
    extra["domain"] = "finance"
    return Question(str(obj["financebench_id"]), str(obj["question"]), [[str(obj["answer"])]],
                    list(dict.fromkeys(evidence)), extra)


def _literal_list(text: object, where: str, what: str) -> list:
    if isinstance(text, list):
        return text
    try:
        value = ast.literal_eval(str(text).strip() or "[]")
    except (ValueError, SyntaxError):
        raise DossierError(f"{where}: {what} {text!r} is not a list like [5, 6]") from None
    if not isinstance(value, (list, tuple)):
        value = [value]
    return list(value)


def _mmlongbench(obj: object, where: str, number: int) -> Question:
    if not isinstance(obj, dict):
        raise DossierError(f"{where}: expected a JSON object")
    for key in ("doc_id", "question", "answer", "evidence_pages"):
        if key not in obj:
            raise DossierError(f"{where}: missing field {key!r} (is this MMLongBench-Doc's samples.json?)")
    doc = _stem(obj["doc_id"])
    pages = _literal_list(obj["evidence_pages"], where, "evidence_pages")
    evidence = [Evidence(doc, parse_page(p, where)) for p in pages]
    answer = obj["answer"]
    parts = [answer]
    if obj.get("answer_format") == "List" and isinstance(answer, str) and answer.strip().startswith("["):
        parts = _literal_list(answer, where, "answer")
    extra = {"doc_type": obj.get("doc_type"), "answer_format": obj.get("answer_format"),
             "evidence_sources": obj.get("evidence_sources"), "category": obj.get("doc_type")}
    return Question(f"mmlongbench-{number:05d}", str(obj["question"]), [[str(p) for p in parts]], evidence, extra)


def mudabench_question_id(question: object, metadata: list) -> str:
    """MuDABench's stable id: sha256 of the question and its metadata rows (their scheme)."""
    def normalise(value):
        if isinstance(value, dict):
            return {str(k): normalise(value[k]) for k in sorted(value, key=str)}
        if isinstance(value, list):
            return [normalise(v) for v in value]
        return value

    payload = {"question": str(question or "").strip(), "metadata": normalise(metadata or [])}
    raw = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return "q_" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def _mudabench(obj: object, where: str) -> Question:
    if not isinstance(obj, dict):
        raise DossierError(f"{where}: expected a JSON object")
    for key in ("question", "metadata", "final_answer"):
        if key not in obj:
            raise DossierError(f"{where}: missing field {key!r} (is this a MuDABench simple/complex.json?)")
    metadata = obj["metadata"]
    if not isinstance(metadata, list):
        raise DossierError(f"{where}: metadata must be a list of document rows")
    qid = str(obj.get("question_id") or mudabench_question_id(obj["question"], metadata))
    documents = list(dict.fromkeys(str(row["id"]) for row in metadata if isinstance(row, dict) and "id" in row))
    extra = {"metadata": metadata, "source_answer": obj.get("source_answer", []),
             "evidence_documents": documents, "hop_type": "cross-document", "domain": "finance"}
    return Question(qid, str(obj["question"]), [[str(obj["final_answer"])]], [], extra)


IMPORTERS: dict[str, Callable] = {
    "madqa": _madqa,
    "financebench": _financebench,
    "mmlongbench": _mmlongbench,
    "mudabench": _mudabench,
}
# DocVQA-2026 records hold a whole document and its questions: engine/datasets/docvqa2026.py
KINDS = (*IMPORTERS, "docvqa2026")


def import_questions(kind: str, source: str | Path) -> tuple[list[Question], list[LineError]]:
    """Read a benchmark's native question file as canonical questions.

    Args:
        kind: one of madqa, financebench, mmlongbench, mudabench, docvqa2026.
        source: the native file (JSONL or a JSON list; parquet for docvqa2026).

    Returns:
        (questions, errors): every malformed item is an error with its location.
    """
    if kind not in KINDS:
        raise DossierError(f"unknown benchmark {kind!r}; choose one of {', '.join(KINDS)}")
    source = Path(source)
    if kind == "docvqa2026":
        from engine.datasets.docvqa2026 import import_docvqa2026

        questions, errors, _ = import_docvqa2026(source)
        return questions, errors
    errors: list[LineError] = []
    questions: list[Question] = []
    seen: set[str] = set()
    for number, (where, obj) in enumerate(iter_json_records(source, errors), start=1):
        location = f"{source}:{where}"
        try:
            if kind == "mmlongbench":
                question = _mmlongbench(obj, location, number)
            else:
                question = IMPORTERS[kind](obj, location)
        except DossierError as err:
            errors.append(LineError(str(source), _line_no(where), str(err).split(": ", 1)[-1]))
            continue
        if question.id in seen:
            errors.append(LineError(str(source), _line_no(where), f"duplicate id {question.id!r}"))
            continue
        seen.add(question.id)
        questions.append(question)
    return questions, errors


def _line_no(where: str) -> int:
    return int(where.split()[-1])
