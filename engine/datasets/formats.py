"""Canonical question and prediction records (MADQA's format, so real MADQA files work unchanged).

Question:   {"id", "question", "answer_variants": [[str, ...], ...], "evidence": [{"document", "page"}], ...}
Prediction: {"id", "question", "answer": str | [str], "citations": [{"document", "page"}],
             "search_history": [...], "iterations": int, ...}

Pages are 1-indexed integers. Fields we do not model are kept verbatim in `extra`
and written back, so a round trip loses nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tools.atomic import atomic_write
from tools.errors import DossierError

__all__ = [
    "Evidence",
    "Question",
    "Prediction",
    "LineError",
    "iter_jsonl",
    "iter_json_records",
    "load_questions",
    "load_predictions",
    "write_jsonl",
    "parse_page",
]


def parse_page(value: object, where: str) -> int:
    """Turn a page given as int or numeric string ("5", " 5 ") into a 1-indexed int.

    MADQA's harness compares pages as given, so "1" never matches 1; we normalise.
    """
    if isinstance(value, bool):
        raise DossierError(f"{where}: page {value!r} is not a page number")
    if isinstance(value, int):
        page = value
    elif isinstance(value, float) and value.is_integer():
        page = int(value)
    elif isinstance(value, str) and value.strip().lstrip("+").isdigit():
        page = int(value.strip())
    else:
        raise DossierError(f"{where}: page {value!r} is not a page number")
    if page < 1:
        raise DossierError(f"{where}: page {page} is not 1-indexed (pages start at 1)")
    return page


@dataclass(slots=True, frozen=True, order=True)
class Evidence:
    """One page of one document."""

    document: str  # document id (the PDF's file stem by default)
    page: int  # 1-indexed page number

    @classmethod
    def from_json(cls, obj: object, where: str) -> Evidence:
        """Parse {"document", "page"}; MADQA's agent writes {"file", "page"}, accepted too."""
        if isinstance(obj, dict) and "document" not in obj and "file" in obj:
            name = str(obj["file"])
            obj = {"document": name[:-4] if name.lower().endswith(".pdf") else name, "page": obj.get("page")}
        if not isinstance(obj, dict) or "document" not in obj or "page" not in obj:
            raise DossierError(f"{where}: evidence {obj!r} needs 'document' and 'page'")
        return cls(str(obj["document"]), parse_page(obj["page"], where))

    def to_json(self) -> dict:
        return {"document": self.document, "page": self.page}


def _evidence_list(value: object, where: str, dropped: list[str] | None = None) -> list[Evidence]:
    """Parse a list of pages. With `dropped`, a bad entry is skipped and described there
    (a prediction keeps its answer when one citation is malformed); without, it raises."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DossierError(f"{where}: expected a list of {{document, page}}, got {type(value).__name__}")
    out = []
    for item in value:
        try:
            out.append(Evidence.from_json(item, where))
        except DossierError as err:
            if dropped is None:
                raise
            dropped.append(str(err).split(": ", 1)[-1])
    return out


@dataclass(slots=True)
class Question:
    """A benchmark item: question, accepted answers and gold evidence pages."""

    id: str
    question: str
    answer_variants: list[list[str]]  # each variant is a list of answer parts (a list answer has several)
    evidence: list[Evidence]
    extra: dict = field(default_factory=dict)  # every other field, kept verbatim

    @classmethod
    def from_json(cls, obj: object, where: str) -> Question:
        if not isinstance(obj, dict):
            raise DossierError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("id", "question") if k not in obj]
        if missing:
            raise DossierError(f"{where}: missing field(s) {', '.join(missing)}")
        variants = obj.get("answer_variants", [])
        if not isinstance(variants, list):
            raise DossierError(f"{where}: answer_variants must be a list of lists of strings")
        answer_variants = []
        for variant in variants:
            parts = variant if isinstance(variant, list) else [variant]
            answer_variants.append([str(p) for p in parts])
        extra = {k: v for k, v in obj.items() if k not in ("id", "question", "answer_variants", "evidence")}
        text = str(obj["question"])
        bad = next((ch for ch in text if "\ud800" <= ch <= "\udfff"), None)
        if bad is not None:  # a lone UTF-16 surrogate: JSON allows the escape, no tokenizer takes the character
            raise DossierError(f"{where}: question {str(obj['id'])!r} holds the escape \\u{ord(bad):04x}, half of a "
                               "UTF-16 pair and no character: fix or remove it in the file")
        return cls(str(obj["id"]), text, answer_variants, _evidence_list(obj.get("evidence"), where), extra)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "question": self.question,
            "answer_variants": self.answer_variants,
            "evidence": [e.to_json() for e in self.evidence],
            **self.extra,
        }


@dataclass(slots=True)
class Prediction:
    """A system's answer to one question, with its citations and effort."""

    id: str | None
    question: str
    answer: str | list[str] | None
    citations: list[Evidence]
    search_history: list = field(default_factory=list)  # queries issued, in order
    iterations: int | None = None  # agent loop iterations (effort when search_history is empty)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str) -> Prediction:
        if not isinstance(obj, dict):
            raise DossierError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if "id" not in obj and "question" not in obj:
            raise DossierError(f"{where}: a prediction needs 'id' or 'question'")
        answer = obj.get("answer")
        if isinstance(answer, list):
            answer = [str(a) for a in answer]
        elif answer is not None:
            answer = str(answer)
        history = obj.get("search_history") or []
        if not isinstance(history, list):
            raise DossierError(f"{where}: search_history must be a list")
        iterations = obj.get("iterations")
        if iterations is not None and not isinstance(iterations, int):
            try:
                iterations = int(iterations)
            except (TypeError, ValueError):
                raise DossierError(f"{where}: iterations {iterations!r} is not an integer") from None
        known = ("id", "question", "answer", "citations", "search_history", "iterations")
        extra = {k: v for k, v in obj.items() if k not in known}
        dropped: list[str] = []
        citations = _evidence_list(obj.get("citations"), where, dropped)
        if dropped:
            extra["dropped_citations"] = dropped  # malformed citations cost the citation, not the answer
        pid = obj.get("id")
        return cls(None if pid is None else str(pid), str(obj.get("question", "")), answer, citations, history,
                   iterations, extra)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "question": self.question,
            "answer": self.answer,
            "citations": [c.to_json() for c in self.citations],
            "search_history": self.search_history,
            "iterations": self.iterations,
            **self.extra,
        }


@dataclass(slots=True, frozen=True)
class LineError:
    """A line of an input file that was skipped, and why."""

    path: str
    line: int  # 1-indexed line number
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def iter_jsonl(path: str | Path, errors: list[LineError]) -> Iterator[tuple[int, object]]:
    """Yield (line number, parsed JSON) for each non-blank line; bad lines go to `errors`.

    Raises:
        DossierError: the file does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise DossierError(f"{path}: no such file (expected a JSON Lines file, one object per line)")
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                errors.append(LineError(str(path), number, f"not UTF-8 (byte {raw[err.start]:#04x} at byte "
                                                           f"{err.start + 1} of the line); save the file as UTF-8"))
                continue
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                errors.append(LineError(str(path), number, f"not valid JSON ({err.msg} at column {err.colno})"))


def iter_json_records(path: Path, errors: list[LineError]) -> Iterator[tuple[str, object]]:
    """(location, object) for each record of a JSONL file or a JSON list file ("line N" / "item N")."""
    if not path.is_file():
        raise DossierError(f"{path}: no such file")
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith(b"["):
        try:
            items = json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as err:
            raise DossierError(f"{path}: not UTF-8 (byte {err.object[err.start]:#04x} at byte {err.start + 1}); save "
                               "the file as UTF-8") from None
        except json.JSONDecodeError as err:
            raise DossierError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
        for number, item in enumerate(items, start=1):
            yield f"item {number}", item
    else:
        for number, obj in iter_jsonl(path, errors):
            yield f"line {number}", obj


def _load(path: str | Path, parse) -> tuple[list, list[LineError]]:
    errors: list[LineError] = []
    items = []
    for number, obj in iter_jsonl(path, errors):
        try:
            items.append(parse(obj, f"{path}:{number}"))
        except DossierError as err:
            errors.append(LineError(str(path), number, str(err).split(": ", 1)[-1]))
    return items, errors


def load_questions(path: str | Path) -> tuple[list[Question], list[LineError]]:
    """Read a canonical question file; malformed lines are returned as errors, never dropped silently."""
    return _load(path, Question.from_json)


def load_predictions(path: str | Path) -> tuple[list[Prediction], list[LineError]]:
    """Read a canonical prediction file; malformed lines are returned as errors."""
    return _load(path, Prediction.from_json)


def write_jsonl(path: str | Path, records) -> int:
    """Write records (dicts or objects with `to_json`) atomically; returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with atomic_write(path, "w") as fh:
        for record in records:
            obj = record.to_json() if hasattr(record, "to_json") else record
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
            count += 1
    return count
