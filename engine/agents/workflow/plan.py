"""The workflow's plan stage: the planner's JSON schema, and checking a plan against the corpus metadata.

The schema is built from the metadata schema, so the model can only restrict fields that exist,
to values that occur (fields with many values take free strings, checked here), and choose a
target unit Dossier knows how to convert to. Dossier then executes the restriction
(tools.corpus.select_documents) and fills the sub-query template for each selected document.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from engine.agents.workflow.records import TARGET_UNITS, first_object
from tools.corpus.metadata import select_documents
from tools.errors import DossierError

__all__ = ["Plan", "plan_schema", "parse_plan", "fill_template", "question_metadata", "PLAN_TOKENS"]

PLAN_TOKENS = 160  # a plan is ~60-100 tokens of JSON
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_GOLD_PREFIXES = ("value_", "detail_")  # MuDABench's gold facts inside a question's metadata rows
_DOC_KEYS = ("chatdoc_upload_id", "doc_id", "document_id", "toBid", "id")


@dataclass(slots=True)
class Plan:
    restriction: dict  # field -> allowed values (executed by Dossier)
    subquery: str  # template with {field} placeholders
    fact: str  # what to extract from each document
    unit: str  # target unit of the records (one of TARGET_UNITS)
    period: str  # the period the fact covers (for the record and the trajectory)
    documents: list[str]  # the documents the restriction selects

    def to_json(self) -> dict:
        return {"restriction": self.restriction, "subquery": self.subquery, "field": self.fact, "unit": self.unit,
                "period": self.period, "documents": self.documents}


def plan_schema(schema: dict) -> dict:
    """JSON schema of the planner's reply for a corpus whose metadata has this field schema."""
    restriction = {}
    for name, info in schema.items():
        values = info.get("values")
        items = {"enum": values} if values else {"type": "string", "minLength": 1, "maxLength": 60}
        restriction[name] = {"type": "array", "items": items, "minItems": 1, "maxItems": len(values) if values else 8}
    return {"type": "object",
            "properties": {"restriction": {"type": "object", "properties": restriction, "additionalProperties": False},
                           "subquery": {"type": "string", "minLength": 8, "maxLength": 160},
                           "field": {"type": "string", "minLength": 2, "maxLength": 40},
                           "unit": {"enum": list(TARGET_UNITS)},
                           "period": {"type": "string", "maxLength": 20}},
            "required": ["restriction", "subquery", "field", "unit", "period"], "additionalProperties": False}


def parse_plan(raw: str, metadata: dict[str, dict]) -> Plan:
    """Check a planner reply and execute its restriction; a DossierError says what to fix."""
    obj = first_object(raw, "plan")
    fields = sorted({key for row in metadata.values() for key in row})
    restriction = obj.get("restriction") or {}
    if not isinstance(restriction, dict):
        raise DossierError("'restriction' must map metadata fields to lists of values")
    unknown = [key for key in restriction if key not in fields]
    if unknown:
        raise DossierError(f"'restriction' names {unknown[0]!r}, which is not a metadata field ({', '.join(fields)})")
    subquery = str(obj.get("subquery") or "").strip()
    if not subquery:
        raise DossierError("'subquery' is empty")
    bad = [name for name in _PLACEHOLDER.findall(subquery) if name not in fields]
    if bad:
        raise DossierError(f"the subquery uses {{{bad[0]}}}, which is not a metadata field ({', '.join(fields)})")
    unit = obj.get("unit")
    if unit not in TARGET_UNITS:
        raise DossierError(f"unit {unit!r} is not one of {', '.join(TARGET_UNITS)}")
    documents = select_documents(metadata, restriction)
    if not documents:
        shown = json.dumps(restriction, ensure_ascii=False)
        raise DossierError(f"the restriction {shown} selects no document; list the values the question needs")
    return Plan(restriction, subquery, str(obj.get("field") or "").strip() or "value", unit,
                str(obj.get("period") or "").strip(), documents)


def fill_template(template: str, fields: dict) -> str:
    """The sub-query for one document: {field} replaced by the document's value (absent fields left as named)."""
    return _PLACEHOLDER.sub(lambda m: str(fields.get(m.group(1), m.group(1))), template)


def question_metadata(question) -> dict[str, dict]:
    """Document metadata carried by an imported MuDABench question (its own document set), gold facts removed."""
    rows = question.extra.get("metadata")
    out: dict[str, dict] = {}
    if not isinstance(rows, list):
        return out
    for row in rows:
        if not isinstance(row, dict):
            continue
        doc = next((str(row[k]) for k in _DOC_KEYS if row.get(k) is not None), None)
        if doc is None:
            continue
        fields = {k: v for k, v in row.items() if k not in _DOC_KEYS and k != "schema"
                  and not k.startswith(_GOLD_PREFIXES) and (v is None or isinstance(v, (str, int, float, bool)))}
        out.setdefault(doc, fields)
    return out
