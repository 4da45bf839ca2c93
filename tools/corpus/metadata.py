"""Document metadata (company, year, report type, ...): read from a file, stored in the corpus, filtered on.

A metadata file is JSONL (or a JSON list), one object per document:

    {"document": "alder-2021", "company": "Alder Robotics", "year": 2021, "report_type": "annual report"}

The document is named by "document" (or "id", or "file" with its .pdf name); every other key
is a field whose value is a string, a number, a boolean or null. `dossier ingest --metadata
FILE` stores the fields in the corpus (table `document_metadata`); a bad line or an unknown
document is reported with its line number and skipped, never stopping the rest.

Filters are what the workflow agent's planner writes and Dossier executes:
`{"year": [2021, 2022], "company": "Alder Robotics"}` keeps the documents whose field equals
one of the listed values. Values are compared as text after trimming and case-folding, so 2021
matches "2021" (MuDABench's rule is exact string equality; case-folding spares a model that
writes "Annual Report" for "annual report").
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tools.errors import DossierError

__all__ = ["read_metadata_file", "matches", "select_documents", "metadata_schema", "MetadataProblem"]

_ID_KEYS = ("document", "id", "file")
MetadataProblem = dict  # {"line": int, "reason": str}


def _document_id(obj: dict) -> str | None:
    for key in _ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value.strip():
            value = value.strip()
            return value[:-4] if value.lower().endswith(".pdf") else value
    return None


def _check_fields(obj: dict) -> dict:
    fields = {}
    for key, value in obj.items():
        if key in _ID_KEYS:
            continue
        if not isinstance(key, str) or not key.strip():
            raise DossierError(f"field name {key!r} must be a non-empty string")
        if not (value is None or isinstance(value, (str, int, float, bool))):
            raise DossierError(f"field {key!r} must be a string, number, boolean or null, got {json.dumps(value)[:60]}")
        fields[key.strip()] = value
    if not fields:
        raise DossierError("no fields besides the document id")
    return fields


def read_metadata_file(path: str | Path) -> tuple[dict[str, dict], list[MetadataProblem]]:
    """Read a metadata file.

    Returns:
        (fields by document id, problems): each problem is {"line": n, "reason": "..."} for a line
        that was skipped (bad JSON, no document id, a nested value, a document listed twice).

    Raises:
        DossierError: the file does not exist or is not JSONL / a JSON list.
    """
    path = Path(path)
    if not path.is_file():
        raise DossierError(f"metadata file {path} does not exist (give a JSONL file: one object per document)")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            items = list(enumerate(json.loads(text), start=1))
        except json.JSONDecodeError as err:
            raise DossierError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    else:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append((number, json.loads(line)))
            except json.JSONDecodeError as err:
                items.append((number, DossierError(f"not valid JSON ({err.msg})")))
    rows: dict[str, dict] = {}
    problems: list[MetadataProblem] = []
    for number, obj in items:
        try:
            if isinstance(obj, Exception):
                raise obj
            if not isinstance(obj, dict):
                raise DossierError("expected a JSON object")
            doc = _document_id(obj)
            if doc is None:
                raise DossierError(f"no document id: give one of {', '.join(repr(k) for k in _ID_KEYS)}")
            if doc in rows:
                raise DossierError(f"document {doc!r} is listed twice; the first entry is kept")
            rows[doc] = _check_fields(obj)
        except DossierError as err:
            problems.append({"line": number, "reason": str(err)})
    return rows, problems


def _norm(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip().casefold()


def matches(fields: dict, restriction: dict) -> bool:
    """Does a document's metadata satisfy a filter? A listed value matches when the field equals one of them.

    A filter on a field the document lacks fails (a document without a year is not "a 2021 report").
    """
    for key, wanted in restriction.items():
        if key not in fields:
            return False
        options = wanted if isinstance(wanted, (list, tuple, set)) else [wanted]
        if _norm(fields[key]) not in {_norm(option) for option in options}:
            return False
    return True


def select_documents(metadata: dict[str, dict], restriction: dict) -> list[str]:
    """Document ids (sorted) whose metadata satisfies the filter; an empty filter selects every document."""
    return sorted(doc for doc, fields in metadata.items() if matches(fields, restriction))


def metadata_schema(metadata: dict[str, dict], max_values: int = 12) -> dict[str, dict]:
    """Each field's type, how many documents have it, and its values when there are few (what a planner sees).

    Returns:
        {field: {"type": "string" | "integer" | "number" | "boolean" | "mixed", "documents": n,
                 "values": [...] or None}}
    """
    seen: dict[str, Counter] = {}
    kinds: dict[str, set[str]] = {}
    for fields in metadata.values():
        for key, value in fields.items():
            seen.setdefault(key, Counter())[json.dumps(value)] += 1
            kinds.setdefault(key, set()).add(_kind(value))
    schema = {}
    for key in sorted(seen):
        values = [json.loads(v) for v in sorted(seen[key])]
        kind = kinds[key] - {"null"}
        schema[key] = {"type": kind.pop() if len(kind) == 1 else ("mixed" if kind else "null"),
                       "documents": sum(seen[key].values()),
                       "values": sorted(values, key=lambda v: (str(type(v)), v)) if len(values) <= max_values else None}
    return schema


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"
