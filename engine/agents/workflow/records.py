"""The workflow's record types: the plan's typed fields, the record schema built from them, and conversion.

A plan declares the facts to extract as typed fields (MuDABench's structuring step: "identify
variable types"):

    {"name": "revenue", "type": "number", "unit": "USD million"}    a number with unit and scale
    {"name": "auditor", "type": "category", "values": ["KPMG", ...]} one of a few values (or free)
    {"name": "profitable", "type": "boolean"}                        true / false
    {"name": "meeting_date", "type": "date"}                         YYYY-MM-DD (or YYYY-MM, YYYY)
    {"name": "chair", "type": "text"}                                a short text

A record is one row per document with one column per field (`record_schema`). A number is
written as printed, with its scale and unit, and Dossier does the arithmetic (`convert`):

    {"revenue": {"value": "12,640", "scale": "thousands", "unit": "USD"}} + "USD million" -> 12.64

Currencies are converted only with a rate from the conversion table the user passes
(`ConversionTable`, JSON {"CNY/USD": 0.1385, ...}: one CNY is 0.1385 USD; the inverse is
derived; no network). A currency without a rate is not an error: the value stays in its own
currency at the target scale, and the conversion says so (`Converted.unconverted`).
Parenthesised values are negative, as in financial tables: "(2.4)" -> -2.4.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from tools.errors import DossierError

__all__ = ["TARGET_UNITS", "SCALES", "UNITS", "CURRENCIES", "FIELD_TYPES", "FieldSpec", "ConversionTable", "Converted",
           "record_schema", "parse_record", "convert", "first_object", "parse_number", "parse_fields"]

SCALES = {"units": Decimal(1), "thousands": Decimal(10) ** 3, "ten thousands": Decimal(10) ** 4,
          "millions": Decimal(10) ** 6, "hundred millions": Decimal(10) ** 8, "billions": Decimal(10) ** 9}
CURRENCIES = ("USD", "EUR", "GBP", "CNY", "JPY", "HKD")
UNITS = (*CURRENCIES, "percent", "count", "other")
# What a plan may ask a number in: a currency at a scale, a percent, or a count.
TARGET_UNITS = tuple(f"{c} {s}".strip() for c in CURRENCIES for s in ("", "thousand", "million", "billion")) + (
    "percent", "count")
_TARGET_SCALE = {"": "units", "thousand": "thousands", "million": "millions", "billion": "billions"}
FIELD_TYPES = ("number", "category", "boolean", "date", "text")
VALUE_PATTERN = r"^\(?-?[0-9][0-9,]{0,15}(\.[0-9]{1,6})?\)?$"
DATE_PATTERN = r"^[0-9]{4}(-[0-9]{2}(-[0-9]{2})?)?$"
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
MAX_TEXT = 80  # characters of a text or category value


@dataclass(slots=True)
class FieldSpec:
    name: str  # the column name ("revenue")
    type: str  # one of FIELD_TYPES
    unit: str | None = None  # numbers: the target unit (one of TARGET_UNITS)
    values: tuple[str, ...] | None = None  # categories: the allowed values (None: any short text)

    def to_json(self) -> dict:
        out = {"name": self.name, "type": self.type}
        if self.unit:
            out["unit"] = self.unit
        if self.values:
            out["values"] = list(self.values)
        return out

    def describe(self) -> str:
        if self.type == "number":
            return f"{self.name} (number, converted to {self.unit})"
        if self.type == "category" and self.values:
            return f"{self.name} (category: {', '.join(self.values)})"
        return f"{self.name} ({self.type})"


def parse_fields(items: object) -> list[FieldSpec]:
    """The plan's "fields" list, checked; a DossierError names the bad field and what to write."""
    if not isinstance(items, list) or not items:
        raise DossierError("'fields' must list at least one fact to extract, e.g. "
                           "[{\"name\": \"revenue\", \"type\": \"number\", \"unit\": \"USD million\"}]")
    specs, seen = [], set()
    for item in items:
        if not isinstance(item, dict):
            raise DossierError(f"field {item!r} must be an object with a name and a type")
        name, kind = str(item.get("name") or ""), item.get("type")
        if not re.fullmatch(NAME_PATTERN, name):
            raise DossierError(f"field name {name!r} must be lower case letters, digits and underscores")
        if name in seen or name == "page":
            raise DossierError(f"field {name!r} is declared twice (or is the reserved 'page')")
        seen.add(name)
        if kind not in FIELD_TYPES:
            raise DossierError(f"field {name!r} has type {kind!r}; use one of {', '.join(FIELD_TYPES)}")
        unit = item.get("unit") if kind == "number" else None
        if kind == "number" and unit not in TARGET_UNITS:
            raise DossierError(f"number field {name!r} has unit {unit!r}; use one of {', '.join(TARGET_UNITS)}")
        values = item.get("values") if kind == "category" else None
        if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) and v for v in values)):
            raise DossierError(f"category field {name!r}: 'values' must be a list of names")
        specs.append(FieldSpec(name, kind, unit, tuple(values) if values else None))
    return specs


class ConversionTable:
    """Rates between units, from the user (no network): {"CNY/USD": 0.1385} means 1 CNY = 0.1385 USD."""

    def __init__(self, rates: dict[str, object] | None = None, source: str = "built in"):
        self.rates: dict[tuple[str, str], Decimal] = {}
        self.source = source
        for pair, rate in (rates or {}).items():
            parts = [p.strip() for p in str(pair).split("/")]
            if len(parts) != 2 or not all(parts):
                raise DossierError(f"conversion table ({source}): {pair!r} is not FROM/TO, e.g. \"CNY/USD\"")
            try:
                value = Decimal(str(rate))
            except InvalidOperation:
                raise DossierError(f"conversion table ({source}): the rate of {pair} is {rate!r}, not a number") from None
            if value <= 0:
                raise DossierError(f"conversion table ({source}): the rate of {pair} must be positive (got {rate})")
            self.rates[(parts[0], parts[1])] = value

    @classmethod
    def load(cls, path: str | Path | None) -> ConversionTable:
        if path is None:
            return cls()
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DossierError(f"conversion table {path} does not exist; write JSON such as "
                               "{\"CNY/USD\": 0.1385, \"EUR/USD\": 1.08}") from None
        except json.JSONDecodeError as err:
            raise DossierError(f"conversion table {path} is not valid JSON ({err.msg}, line {err.lineno})") from None
        if not isinstance(data, dict):
            raise DossierError(f"conversion table {path} must be one JSON object of \"FROM/TO\": rate")
        return cls(data, str(path))

    def rate(self, unit: str, target: str) -> Decimal | None:
        if unit == target:
            return Decimal(1)
        if (unit, target) in self.rates:
            return self.rates[(unit, target)]
        if (target, unit) in self.rates:
            return 1 / self.rates[(target, unit)]
        return None

    def units(self) -> list[str]:
        return sorted({u for pair in self.rates for u in pair})

    def to_json(self) -> dict:
        return {"source": self.source, "rates": {f"{a}/{b}": float(r) for (a, b), r in self.rates.items()}}


@dataclass(slots=True)
class Converted:
    value: float  # in `unit`
    unit: str  # the target unit, or (unconverted) the page's currency at the target's scale
    unconverted: str | None = None  # why the currency was left as it is (no rate in the table)


def parse_number(text: str) -> Decimal:
    cleaned = str(text).strip()
    negative = cleaned.startswith("(") and cleaned.endswith(")")
    cleaned = cleaned.strip("()").replace(",", "")
    if not re.fullmatch(r"-?\d+(\.\d+)?", cleaned):
        raise DossierError(f"value {text!r} is not a number like 12,640 or 17.9")
    value = Decimal(cleaned)
    return -value if negative else value


def convert(number: dict, target: str, table: ConversionTable) -> Converted:
    """{"value", "scale", "unit"} as the page prints it, in the `target` unit (one of TARGET_UNITS)."""
    value = parse_number(number["value"]) * SCALES[number["scale"]]
    unit = number["unit"]
    if target in ("percent", "count"):
        if unit != target:
            raise DossierError(f"the page gives {unit}, but the plan asks for {target}")
        printed = parse_number(number["value"])
        return Converted(float(printed * SCALES[number["scale"]] if target == "count" else printed), target)
    currency, _, size = target.partition(" ")
    scale = SCALES[_TARGET_SCALE[size]]
    if unit not in CURRENCIES and unit not in table.units():
        raise DossierError(f"the page gives {unit}, but the plan asks for money in {target}")
    rate = table.rate(unit, currency)
    if rate is None:
        shown = f"{unit} {size}".strip()
        return Converted(float(value / scale), shown, f"no {unit}/{currency} rate in the conversion table "
                                                      f"({table.source}); left in {unit}")
    return Converted(float(value * rate / scale), target)


def first_object(raw: str, what: str) -> dict:
    """The first JSON object of a model reply (text after it ignored); a DossierError naming `what` otherwise."""
    text = raw.strip()
    if "{" not in text:
        raise DossierError(f"the {what} is not a JSON object")
    try:
        obj = json.JSONDecoder(strict=False).raw_decode(text[text.find("{"):])[0]
    except json.JSONDecodeError as err:
        raise DossierError(f"the {what} is not valid JSON ({err.msg})") from None
    if not isinstance(obj, dict):
        raise DossierError(f"the {what} must be one JSON object")
    return obj


def _field_schema(spec: FieldSpec, units: list[str]) -> dict:
    if spec.type == "number":
        inner = {"type": "object", "properties": {"value": {"type": "string", "pattern": VALUE_PATTERN},
                                                  "scale": {"enum": list(SCALES)}, "unit": {"enum": units}},
                 "required": ["value", "scale", "unit"], "additionalProperties": False}
    elif spec.type == "category":
        inner = {"enum": list(spec.values)} if spec.values else {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
    elif spec.type == "boolean":
        inner = {"type": "boolean"}
    elif spec.type == "date":
        inner = {"type": "string", "pattern": DATE_PATTERN}
    else:
        inner = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
    return {"anyOf": [inner, {"type": "null"}]}  # null: the document does not state it


def record_schema(fields: list[FieldSpec], pages: list[int] | None, max_page: int,
                  table: ConversionTable | None = None) -> dict:
    """JSON schema of one document's record: one property per field, and the page it came from."""
    units = list(dict.fromkeys([*UNITS, *((table or ConversionTable()).units())]))
    page = {"type": "integer", "enum": sorted(set(pages))} if pages else {"type": "integer", "minimum": 1,
                                                                          "maximum": max(1, max_page)}
    properties = {spec.name: _field_schema(spec, units) for spec in fields}
    properties["page"] = page
    return {"type": "object", "properties": properties, "required": [*(s.name for s in fields), "page"],
            "additionalProperties": False}


def _check_value(spec: FieldSpec, value: object, units: list[str]) -> object:
    """One field's value, type-checked; a DossierError names the field, the value and the expected type."""
    if value is None:
        return None
    if spec.type == "number":
        if not isinstance(value, dict) or not {"value", "scale", "unit"} <= set(value):
            raise DossierError(f"{spec.name} must be {{\"value\", \"scale\", \"unit\"}} (got {value!r})")
        if value["scale"] not in SCALES:
            raise DossierError(f"{spec.name}: scale {value['scale']!r} is not one of {', '.join(SCALES)}")
        if value["unit"] not in units:
            raise DossierError(f"{spec.name}: unit {value['unit']!r} is not one of {', '.join(units)}")
        parse_number(str(value["value"]))
        return {"value": str(value["value"]), "scale": value["scale"], "unit": value["unit"]}
    if spec.type == "boolean":
        if not isinstance(value, bool):
            raise DossierError(f"{spec.name} must be true or false (got {value!r})")
        return value
    if not isinstance(value, str) or not value.strip():
        raise DossierError(f"{spec.name} must be a {spec.type} written as text (got {value!r})")
    if spec.type == "date" and not re.fullmatch(DATE_PATTERN, value.strip()):
        raise DossierError(f"{spec.name}: {value!r} is not a date written YYYY-MM-DD")
    if spec.type == "category" and spec.values and value not in spec.values:
        raise DossierError(f"{spec.name}: {value!r} is not one of {', '.join(spec.values)}")
    return value.strip()[:MAX_TEXT]


def parse_record(raw: str, fields: list[FieldSpec], table: ConversionTable | None = None) -> dict:
    """A document's record JSON, every field type-checked; a DossierError says what is wrong."""
    obj = first_object(raw, "record")
    units = list(dict.fromkeys([*UNITS, *((table or ConversionTable()).units())]))
    out = {}
    for spec in fields:
        if spec.name not in obj:
            raise DossierError(f"the record lacks {spec.name!r}")
        out[spec.name] = _check_value(spec, obj[spec.name], units)
    if all(out[s.name] is None for s in fields):
        raise DossierError("every field of the record is null; write the facts the dialog gives")
    page = obj.get("page")
    if not isinstance(page, int) or isinstance(page, bool) or page < 1:
        raise DossierError(f"page {page!r} is not a page number")
    out["page"] = page
    return out
