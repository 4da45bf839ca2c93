"""Tool specs: defined once, exported as JSON for prompts and as one schema for constrained decoding."""

import json

import pytest

from tools.errors import DossierError
from tools.perception import PERCEPTION_TOOLS
from tools.schema import ToolRegistry, ToolSpec


def test_registry_exports_the_five_perception_tools():
    registry = ToolRegistry(PERCEPTION_TOOLS)
    exported = registry.to_json()
    assert [t["name"] for t in exported] == ["text_recovery", "visual_detail", "spatial_recovery",
                                             "structure_recovery", "targeted_lookup"]
    assert all(t["description"] and t["parameters"]["type"] == "object" for t in exported)
    json.dumps(exported)  # serialisable as is
    lookup = registry.get("targeted_lookup").parameters
    assert lookup["required"] == ["document", "page", "question"]


def test_call_schema_compiles_with_xgrammar_and_accepts_only_valid_calls():
    xgr = pytest.importorskip("xgrammar")
    grammar = xgr.Grammar.from_json_schema(json.dumps(ToolRegistry(PERCEPTION_TOOLS).call_schema()))
    accepts = xgr.testing._is_grammar_accept_string
    assert accepts(grammar, '{"name": "text_recovery", "arguments": {"document": "d", "page": 2, "region": [0, 0.5, 1, 1]}}')
    assert accepts(grammar, '{"name": "targeted_lookup", "arguments": {"document": "d", "page": 1, "question": "total?"}}')
    assert not accepts(grammar, '{"name": "text_recovery", "arguments": {"document": "d", "page": 0}}')
    assert not accepts(grammar, '{"name": "targeted_lookup", "arguments": {"document": "d", "page": 1}}')
    assert not accepts(grammar, '{"name": "zoom", "arguments": {"document": "d", "page": 1}}')
    assert not accepts(grammar, '{"name": "text_recovery", "arguments": {"document": "d", "page": 1, "region": [0, 0, 2, 1]}}')


def test_validate_fills_defaults_and_names_the_bad_argument():
    registry = ToolRegistry(PERCEPTION_TOOLS)
    args = registry.validate("spatial_recovery", {"document": "d", "page": 3.0})
    assert args == {"document": "d", "page": 3, "mode": "words", "corridor": 0.02, "source": "auto"}
    with pytest.raises(DossierError, match='spatial_recovery.mode must be one of "words", "colors", "line"; got "pixels"'):
        registry.validate("spatial_recovery", {"document": "d", "page": 1, "mode": "pixels"})
    with pytest.raises(DossierError, match="missing required argument 'question'"):
        registry.validate("targeted_lookup", {"document": "d", "page": 1})
    with pytest.raises(DossierError, match="unknown argument 'zoom'"):
        registry.validate("visual_detail", {"document": "d", "page": 1, "zoom": 2})
    with pytest.raises(DossierError, match=r"region must have exactly 4 items"):
        registry.validate("text_recovery", {"document": "d", "page": 1, "region": [0, 0, 1]})
    with pytest.raises(DossierError, match="page must be integer, got true"):
        registry.validate("text_recovery", {"document": "d", "page": True})


def test_specs_are_checked_and_names_unique():
    with pytest.raises(DossierError, match="tool name 'Bad Name'"):
        ToolSpec("Bad Name", "x", {"type": "object"})
    with pytest.raises(DossierError, match="registered twice"):
        ToolRegistry([PERCEPTION_TOOLS[0], PERCEPTION_TOOLS[0]])
    answer = ToolSpec("answer", "Submit the final answer.", {"type": "object", "properties": {"answer": {"type": "string"}},
                                                              "required": ["answer"]})
    registry = ToolRegistry([*PERCEPTION_TOOLS, answer])  # other agents add their own specs the same way
    assert "answer" in registry and len(registry.call_schema()["oneOf"]) == 6
