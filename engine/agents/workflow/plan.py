"""The workflow's plan stage: the planner's JSON schema, and checking a plan against MuDABench's template rules.

A plan (MuDABench A.7, "Plan Agent") has a restriction over the documents' metadata, typed
fields to extract (records.FieldSpec) and one or more sub-query templates, each asking for some
of the fields, optionally with its own metadata restriction:

    {"restriction": {"year": [2023], "report_type": ["annual report"]},
     "fields": [{"name": "revenue", "type": "number", "unit": "USD million"},
                {"name": "auditor", "type": "category"}],
     "templates": [{"subquery": "What was the revenue of {company} in {year}?", "fields": ["revenue"]},
                   {"subquery": "Which firm audited {company}'s {year} accounts?", "fields": ["auditor"]}],
     "period": "2023"}

`parse_plan` checks the paper's three rules, each failure a DossierError the model sees on its
one retry:
  single document      a template filled for two of its documents must read differently (the
                       fields in braces tell the documents apart), so each is one document's question;
  mutual exclusivity   no two templates read the same, and no field is asked by two templates of
                       one document;
  metadata placement   every metadata field the plan selects on is in braces in at least one
                       template, and every name in braces is a metadata field. The paper's
                       template rules state it, more strictly ("Metadata Placement", beside
                       "Single Document Oriented" and "Semantic Mutual Exclusivity"): "all
                       available metadata fields are placed by{} in at least one template,
                       while all metadata fields must use naming consistent with the metadata
                       field description when placed in templates"; Dossier asks it only of
                       the fields a plan selects on.
Dossier then executes the restrictions (tools.corpus.select_documents) and fills the templates.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from engine.agents.workflow.records import FIELD_TYPES, NAME_PATTERN, TARGET_UNITS, FieldSpec, first_object, \
    parse_fields
from tools.corpus.metadata import select_documents
from tools.errors import DossierError

__all__ = ["Plan", "Template", "plan_schema", "parse_plan", "fill_template", "PLAN_TOKENS", "MAX_TEMPLATES"]

PLAN_TOKENS = 512  # a plan with two templates and three fields is ~150-250 tokens of JSON; four long ones ~450
MAX_TEMPLATES = 4
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(slots=True)
class Template:
    subquery: str  # with {field} placeholders
    fields: list[str]  # the plan fields this sub-query asks for
    restriction: dict  # this template's own metadata restriction (within the plan's)
    documents: list[str]  # the documents it is asked of

    def to_json(self) -> dict:
        return {"subquery": self.subquery, "fields": self.fields, "restriction": self.restriction,
                "documents": self.documents}


@dataclass(slots=True)
class Plan:
    restriction: dict  # field -> allowed values (executed by Dossier)
    fields: list[FieldSpec]  # the typed facts; the record schema is built from them
    templates: list[Template]
    period: str  # the period the facts cover (for the trajectory)
    documents: list[str]  # every document some template is asked of, sorted

    def to_json(self) -> dict:
        return {"restriction": self.restriction, "fields": [f.to_json() for f in self.fields],
                "templates": [t.to_json() for t in self.templates], "period": self.period,
                "documents": self.documents}

    def fields_of(self, document: str) -> list[FieldSpec]:
        """The fields asked of one document (the columns of its record), in the plan's order."""
        asked = {name for t in self.templates if document in t.documents for name in t.fields}
        return [f for f in self.fields if f.name in asked]


def _restriction_schema(schema: dict) -> dict:
    restriction = {}
    for name, info in schema.items():
        values = info.get("values")
        items = {"enum": values} if values else {"type": "string", "minLength": 1, "maxLength": 60}
        restriction[name] = {"type": "array", "items": items, "minItems": 1, "maxItems": len(values) if values else 8}
    return {"type": "object", "properties": restriction, "additionalProperties": False}


def plan_schema(schema: dict) -> dict:
    """JSON schema of the planner's reply for a corpus whose metadata has this field schema."""
    name = {"type": "string", "pattern": NAME_PATTERN}
    number = {"type": "object", "properties": {"name": name, "type": {"const": "number"},
                                               "unit": {"enum": list(TARGET_UNITS)}},
              "required": ["name", "type", "unit"], "additionalProperties": False}  # a number always has its unit
    other = {"type": "object", "properties": {"name": name, "type": {"enum": [t for t in FIELD_TYPES if t != "number"]}},
             "required": ["name", "type"], "additionalProperties": False}
    field = {"anyOf": [number, other]}
    template = {"type": "object",
                "properties": {"subquery": {"type": "string", "minLength": 8, "maxLength": 160},
                               "fields": {"type": "array", "items": {"type": "string", "pattern": NAME_PATTERN},
                                          "minItems": 1, "maxItems": 4},
                               "restriction": _restriction_schema(schema)},
                "required": ["subquery", "fields"], "additionalProperties": False}
    return {"type": "object",
            "properties": {"restriction": _restriction_schema(schema),
                           "fields": {"type": "array", "items": field, "minItems": 1, "maxItems": 4},
                           "templates": {"type": "array", "items": template, "minItems": 1,
                                         "maxItems": MAX_TEMPLATES},
                           "period": {"type": "string", "maxLength": 20}},
            "required": ["restriction", "fields", "templates", "period"], "additionalProperties": False}


def _restriction(value: object, fields: list[str], where: str) -> dict:
    restriction = value or {}
    if not isinstance(restriction, dict):
        raise DossierError(f"{where} 'restriction' must map metadata fields to lists of values")
    unknown = [key for key in restriction if key not in fields]
    if unknown:
        raise DossierError(f"{where} 'restriction' names {unknown[0]!r}, which is not a metadata field "
                           f"({', '.join(fields)})")
    return restriction


def _template(index: int, item: object, fields: list[str], declared: list[str], metadata: dict,
              selected: list[str]) -> Template:
    where = f"template {index + 1}"
    if not isinstance(item, dict):
        raise DossierError(f"{where} must be an object with a 'subquery' and its 'fields'")
    subquery = str(item.get("subquery") or "").strip()
    if not subquery:
        raise DossierError(f"{where} has an empty 'subquery'")
    bad = [name for name in _PLACEHOLDER.findall(subquery) if name not in fields]
    if bad:
        raise DossierError(f"{where} uses {{{bad[0]}}}, which is not a metadata field ({', '.join(fields)})")
    asked = item.get("fields")
    if not isinstance(asked, list) or not asked:
        raise DossierError(f"{where} must name the fields it asks for in 'fields' (some of {', '.join(declared)})")
    unknown = [str(a) for a in asked if a not in declared]
    if unknown:
        raise DossierError(f"{where} asks for {unknown[0]!r}, which the plan's 'fields' do not declare "
                           f"({', '.join(declared)})")
    restriction = _restriction(item.get("restriction"), fields, where)
    documents = [d for d in select_documents(metadata, restriction) if d in set(selected)]
    if not documents:
        raise DossierError(f"{where}'s restriction {json.dumps(restriction, ensure_ascii=False)} selects none of "
                           "the plan's documents")
    filled: dict[str, str] = {}
    for document in documents:  # single document: each document gets its own question
        text = fill_template(subquery, metadata[document])
        if text in filled:
            named = ", ".join("{" + f + "}" for f in fields[:3])
            raise DossierError(f"{where} reads the same for {filled[text]} and {document} ({text!r}): it is not a "
                               f"single-document question; put the metadata that tells documents apart in braces "
                               f"(e.g. {named})")
        filled[text] = document
    return Template(subquery, list(dict.fromkeys(str(a) for a in asked)), restriction, documents)


def _exclusive(templates: list[Template]) -> None:
    """MuDABench's mutual exclusivity: distinct questions, and no fact of a document asked twice."""
    seen: dict[str, int] = {}
    for index, template in enumerate(templates):
        key = " ".join(_PLACEHOLDER.sub("{}", template.subquery).lower().split())
        if key in seen:
            raise DossierError(f"templates {seen[key] + 1} and {index + 1} ask the same question; "
                               "templates must be mutually exclusive")
        seen[key] = index
    for i, first in enumerate(templates):
        for j in range(i + 1, len(templates)):
            second = templates[j]
            shared = set(first.documents) & set(second.documents)
            twice = [f for f in first.fields if f in second.fields]
            if shared and twice:
                raise DossierError(f"templates {i + 1} and {j + 1} both ask for {twice[0]!r} of {sorted(shared)[0]}; "
                                   "templates must be mutually exclusive (each field from one template)")


def parse_plan(raw: str, metadata: dict[str, dict]) -> Plan:
    """Check a planner reply against the template rules and execute its restrictions; a DossierError says what to fix."""
    obj = first_object(raw, "plan")
    fields = sorted({key for row in metadata.values() for key in row})
    restriction = _restriction(obj.get("restriction"), fields, "the plan's")
    specs = parse_fields(obj.get("fields"))
    declared = [s.name for s in specs]
    clash = [name for name in declared if name in fields]
    if clash:
        raise DossierError(f"field {clash[0]!r} is a metadata field (each record carries it already); name the fact "
                           "to extract instead")
    selected = select_documents(metadata, restriction)
    if not selected:
        shown = json.dumps(restriction, ensure_ascii=False)
        raise DossierError(f"the restriction {shown} selects no document; list the values the question needs")
    items = obj.get("templates")
    if not isinstance(items, list) or not items:
        raise DossierError("'templates' must list at least one sub-query template, e.g. "
                           "[{\"subquery\": \"What was the revenue of {company} in {year}?\", \"fields\": [\"revenue\"]}]")
    if len(items) > MAX_TEMPLATES:
        raise DossierError(f"{len(items)} templates; at most {MAX_TEMPLATES}")
    templates = [_template(i, item, fields, declared, metadata, selected) for i, item in enumerate(items)]
    _exclusive(templates)
    unused = [name for name in declared if not any(name in t.fields for t in templates)]
    if unused:
        raise DossierError(f"no template asks for the field {unused[0]!r}; ask for it or leave it out of 'fields'")
    placed = {name for t in templates for name in _PLACEHOLDER.findall(t.subquery)}
    selecting = list(dict.fromkeys([*restriction, *(k for t in templates for k in t.restriction)]))
    missing = [name for name in selecting if name not in placed]
    if missing:
        raise DossierError(f"the plan selects on {missing[0]!r} but no template has {{{missing[0]}}}; every metadata "
                           "field the plan selects on must be in braces in at least one template")
    documents = sorted({d for t in templates for d in t.documents})
    return Plan(restriction, specs, templates, str(obj.get("period") or "").strip(), documents)


def fill_template(template: str, fields: dict) -> str:
    """The sub-query for one document: {field} replaced by the document's value (absent fields left as named)."""
    return _PLACEHOLDER.sub(lambda m: str(fields.get(m.group(1), m.group(1))), template)
