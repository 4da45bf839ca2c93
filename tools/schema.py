"""Tool specifications shared by every agent: name, description and a JSON schema for the arguments.

A `ToolSpec` is defined once beside the tool it describes (the perception tools in
`tools/perception/specs.py`; the BM25 agent's `search` and `answer` beside the search tool)
and an agent collects the specs it offers into a `ToolRegistry`. The registry exports

- `to_json()`: the list of `{"name", "description", "parameters"}` objects a chat template
  shows the model (the OpenAI/Qwen "function" shape);
- `call_schema()`: one JSON schema that accepts exactly the well-formed calls
  `{"name": <tool>, "arguments": {...}}` of the registered tools, for xgrammar-constrained
  decoding (`GrammarCompiler.compile_json_schema`);
- `validate(name, arguments)`: the same check in Python, raising `DossierError` with a
  message that names the bad argument, for calls made without a grammar.

The validator covers the JSON-schema subset the specs use: type (object, string, integer,
number, boolean, array, null), properties, required, additionalProperties, enum, const,
minimum/maximum, minLength/maxLength, items, minItems/maxItems, and defaults for missing optionals.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from tools.errors import DossierError

__all__ = ["ToolSpec", "ToolRegistry"]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_TYPES = {
    "object": dict,
    "string": str,
    "array": (list, tuple),
    "boolean": bool,
    "null": type(None),
}


@dataclass(slots=True, frozen=True)
class ToolSpec:
    """One tool an agent may call.

    Args:
        name: the identifier the model writes (lower case, digits, underscores).
        description: what the tool returns and when to use it, written for the model.
        parameters: JSON schema of the arguments; must be an object schema.
    """

    name: str  # identifier the model writes in a call
    description: str  # shown to the model; says what the tool returns and when it helps
    parameters: dict  # JSON schema (type "object") of the call's arguments

    def __post_init__(self):
        if not _NAME.match(self.name):
            raise DossierError(f"tool name {self.name!r} must match {_NAME.pattern} (e.g. 'text_recovery')")
        if not self.description.strip():
            raise DossierError(f"tool {self.name!r} needs a description (the model reads it)")
        if self.parameters.get("type") != "object":
            raise DossierError(f"tool {self.name!r}: parameters must be a JSON schema of type 'object'")
        json.dumps(self.parameters)  # must be JSON-serialisable

    def to_json(self) -> dict:
        """The `{"name", "description", "parameters"}` object chat templates expect."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def call_schema(self) -> dict:
        """JSON schema of one call to this tool: `{"name": <name>, "arguments": {...}}`."""
        return {
            "type": "object",
            "properties": {"name": {"const": self.name}, "arguments": self.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }

    def validate(self, arguments) -> dict:
        """Check a call's arguments and fill in defaults.

        Returns:
            A new dict with the arguments plus the defaults of missing optional ones.

        Raises:
            DossierError: an argument is missing, unknown, of the wrong type or out of range;
                the message names it and echoes the bad value.
        """
        if not isinstance(arguments, dict):
            raise DossierError(f"{self.name}: arguments must be a JSON object, got {_show(arguments)}")
        _check(arguments, self.parameters, f"{self.name}")
        filled = dict(arguments)
        for key, prop in self.parameters.get("properties", {}).items():
            if key not in filled and "default" in prop:
                filled[key] = prop["default"]
            elif prop.get("type") == "integer" and isinstance(filled.get(key), float):
                filled[key] = int(filled[key])  # 3.0 is a valid JSON integer; tools get an int
        return filled


class ToolRegistry:
    """An ordered set of tool specs, looked up by name; duplicates are an error.

    Example:
        >>> from tools.perception import PERCEPTION_TOOLS
        >>> registry = ToolRegistry(PERCEPTION_TOOLS)
        >>> schema = json.dumps(registry.call_schema())  # compile with xgrammar
    """

    def __init__(self, specs: Iterable[ToolSpec] = ()):
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: ToolSpec) -> None:
        if spec.name in self._specs:
            raise DossierError(f"tool {spec.name!r} is registered twice")
        self._specs[spec.name] = spec

    def __contains__(self, name: str) -> bool:
        return name in self._specs

    def __iter__(self):
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    @property
    def names(self) -> list[str]:
        return list(self._specs)

    def get(self, name: str) -> ToolSpec:
        """The spec called `name`.

        Raises:
            DossierError: no such tool (the message lists the known ones).
        """
        spec = self._specs.get(name)
        if spec is None:
            raise DossierError(f"unknown tool {name!r}; the tools are: {', '.join(self._specs) or 'none'}")
        return spec

    def to_json(self) -> list[dict]:
        """Every spec as `{"name", "description", "parameters"}`, in registration order."""
        return [spec.to_json() for spec in self._specs.values()]

    def call_schema(self) -> dict:
        """One JSON schema accepting a call to any registered tool (for constrained decoding)."""
        if not self._specs:
            raise DossierError("no tools registered: add at least one ToolSpec")
        calls = [spec.call_schema() for spec in self._specs.values()]
        return calls[0] if len(calls) == 1 else {"oneOf": calls}

    def validate(self, name: str, arguments) -> dict:
        """Validate a call: the tool exists and its arguments fit the schema; returns them with defaults."""
        return self.get(name).validate(arguments)


def _show(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_ok(value, kind: str) -> bool:
    if kind == "integer":
        if isinstance(value, float):
            return value.is_integer()
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    python = _TYPES.get(kind)
    if python is None:
        raise AssertionError(f"schema type {kind!r} is not supported by the validator")
    return isinstance(value, python) and not (kind != "boolean" and isinstance(value, bool))


def _check(value, schema: dict, where: str) -> None:
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_type_ok(value, k) for k in kinds):
            raise DossierError(f"{where} must be {' or '.join(kinds)}, got {_show(value)}")
    if "const" in schema and value != schema["const"]:
        raise DossierError(f"{where} must be {_show(schema['const'])}, got {_show(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise DossierError(f"{where} must be one of {', '.join(map(_show, schema['enum']))}; got {_show(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise DossierError(f"{where} must be >= {schema['minimum']}, got {_show(value)}")
        if "maximum" in schema and value > schema["maximum"]:
            raise DossierError(f"{where} must be <= {schema['maximum']}, got {_show(value)}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        raise DossierError(f"{where} must have at least {schema['minLength']} characters, got {_show(value)}")
    if isinstance(value, str) and "maxLength" in schema and len(value) > schema["maxLength"]:
        raise DossierError(f"{where} must have at most {schema['maxLength']} characters (got {len(value)}): "
                           f"shorten it")
    if isinstance(value, (list, tuple)):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            low, high = schema.get("minItems", 0), schema.get("maxItems", "any")
            count = f"exactly {low}" if low == high else f"{low}..{high}"
            raise DossierError(f"{where} must have {count} items, got {_show(value)}")
        if "items" in schema:
            for index, item in enumerate(value):
                _check(item, schema["items"], f"{where}[{index}]")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                raise DossierError(f"{where}: missing required argument {key!r}")
        if schema.get("additionalProperties", True) is False:
            unknown = [k for k in value if k not in properties]
            if unknown:
                raise DossierError(f"{where}: unknown argument {unknown[0]!r} (expected: {', '.join(properties)})")
        for key, item in value.items():
            if key in properties:
                _check(item, properties[key], f"{where}.{key}")
