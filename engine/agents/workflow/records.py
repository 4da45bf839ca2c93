"""The workflow's normalise stage: one extracted fact -> one validated record in the plan's target unit.

The model writes a record as JSON constrained by `record_schema` (xgrammar): the value as the
page prints it, its scale (units, thousands, millions, billions), its unit (a currency, percent
or count) and the page. Dossier, not the model, does the arithmetic of normalisation:

    {"value": "12,640", "scale": "thousands", "unit": "USD", "page": 2}  + target "USD million"
    -> {"value": 12.64, "unit": "USD million", "raw": {...}}

What cannot be converted is an error the model is shown once (a currency other than the
target's: no exchange rates here; a percent where money is asked), never a silent guess.
Parenthesised values are negative, as in financial tables: "(2.4)" -> -2.4.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from tools.errors import DossierError

__all__ = ["TARGET_UNITS", "SCALES", "UNITS", "record_schema", "parse_record", "normalise", "convert", "first_object"]

SCALES = {"units": Decimal(1), "thousands": Decimal(10) ** 3, "millions": Decimal(10) ** 6,
          "billions": Decimal(10) ** 9}
CURRENCIES = ("USD", "EUR", "GBP", "CNY", "JPY")
UNITS = (*CURRENCIES, "percent", "count", "other")
# What a plan may ask for: a currency at a scale, a percent, or a count.
TARGET_UNITS = tuple(f"{c} {s}".strip() for c in CURRENCIES for s in ("", "thousand", "million", "billion")) + (
    "percent", "count")
_TARGET_SCALE = {"": "units", "thousand": "thousands", "million": "millions", "billion": "billions"}
VALUE_PATTERN = r"^\(?-?[0-9][0-9,]{0,15}(\.[0-9]{1,6})?\)?$"


def record_schema(pages: list[int] | None, max_page: int) -> dict:
    """JSON schema of one record; `pages`: the pages the episode saw (the record must cite one of them)."""
    page = {"type": "integer", "enum": sorted(set(pages))} if pages else {"type": "integer", "minimum": 1,
                                                                          "maximum": max(1, max_page)}
    return {"type": "object",
            "properties": {"value": {"type": "string", "pattern": VALUE_PATTERN},
                           "scale": {"enum": list(SCALES)},
                           "unit": {"enum": list(UNITS)},
                           "page": page},
            "required": ["value", "scale", "unit", "page"], "additionalProperties": False}


def _number(text: str) -> Decimal:
    cleaned = text.strip()
    negative = cleaned.startswith("(") and cleaned.endswith(")")
    cleaned = cleaned.strip("()").replace(",", "")
    if not re.fullmatch(r"-?\d+(\.\d+)?", cleaned):
        raise DossierError(f"value {text!r} is not a number like 12,640 or 17.9")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise DossierError(f"value {text!r} is not a number") from None
    return -value if negative else value


def first_object(raw: str, what: str) -> dict:
    """The first JSON object of a model reply (text after it ignored); a DossierError naming `what` otherwise."""
    import json

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


def parse_record(raw: str) -> dict:
    """The model's record JSON, checked; raises DossierError naming what is wrong."""
    obj = first_object(raw, "record")
    for key in ("value", "scale", "unit", "page"):
        if key not in obj:
            raise DossierError(f"the record lacks {key!r}")
    if obj["scale"] not in SCALES:
        raise DossierError(f"scale {obj['scale']!r} is not one of {', '.join(SCALES)}")
    if obj["unit"] not in UNITS:
        raise DossierError(f"unit {obj['unit']!r} is not one of {', '.join(UNITS)}")
    if not isinstance(obj["page"], int) or obj["page"] < 1:
        raise DossierError(f"page {obj['page']!r} is not a page number")
    _number(str(obj["value"]))
    return {"value": str(obj["value"]), "scale": obj["scale"], "unit": obj["unit"], "page": obj["page"]}


def convert(value: Decimal, scale: str, unit: str, target: str) -> Decimal:
    """`value` at `scale` in `unit`, expressed in the `target` unit (one of TARGET_UNITS)."""
    if target not in TARGET_UNITS:
        raise DossierError(f"target unit {target!r} is not one of {', '.join(TARGET_UNITS)}")
    if target in ("percent", "count"):
        if unit != target:
            raise DossierError(f"the page gives {unit}, but the plan asks for {target}")
        return value * SCALES[scale] if target == "count" else value
    currency, _, size = target.partition(" ")
    if unit not in CURRENCIES:
        raise DossierError(f"the page gives {unit}, but the plan asks for money in {target}")
    if unit != currency:
        raise DossierError(f"the value is in {unit} but the plan asks for {currency}; there are no exchange rates")
    return value * SCALES[scale] / SCALES[_TARGET_SCALE[size]]


def normalise(record: dict, target: str) -> dict:
    """A parsed record in the target unit: {"value": float, "unit": target, "raw": record}."""
    value = convert(_number(record["value"]), record["scale"], record["unit"], target)
    return {"value": float(value), "unit": target, "raw": dict(record)}
