"""The model-family registry: every family the engine runs, registered in one table.

Loading, benchmarks and tests look families up here (by HF config `model_type`, by
random-weight shape name, or all of them); nothing outside a family file branches on a
model type. Adding a family is one new file in `models/families/` defining a `FamilySpec`
(models/family.py) plus one line in `REGISTERED` below. Its parity tests come with it:
tests/engine/test_families.py runs every registered text family against its HF reference.

Family modules are imported on the first lookup (vLLM's registry does the same), so
importing this module stays cheap.
"""

import importlib
from functools import cache

from models.family import FamilySpec
from tools.errors import DossierError

__all__ = ["REGISTERED", "families", "family_for", "family_named", "shape", "shape_names"]

# One line per family: "module:NAME" of its FamilySpec.
REGISTERED: tuple[str, ...] = (
    "models.families.llama:FAMILY",
    "models.families.qwen2:FAMILY",
    "models.families.qwen3:FAMILY",
    "models.families.gemma3:FAMILY",
    "models.families.gemma4:FAMILY",
    "models.families.qwen3_5:FAMILY",
    "models.families.qwen_vl:QWEN2_VL",
    "models.families.qwen_vl:QWEN2_5_VL",
    "models.families.qwen_vl:QWEN3_VL",
    "models.families.glm4v:FAMILY",
    "models.families.glm4v:GLM46V",
    "models.families.qwen3_5:QWEN3_5_VL",
    "models.families.gemma3_vl:FAMILY",
    "models.families.gemma4_vl:FAMILY",
)


@cache
def families() -> tuple[FamilySpec, ...]:
    """Every registered family, in registration order."""
    found = []
    for entry in REGISTERED:
        module, _, name = entry.partition(":")
        found.append(getattr(importlib.import_module(module), name))
    types = [t for family in found for t in family.model_types]
    assert len(types) == len(set(types)), f"a model_type is registered twice: {types}"
    names = [s for family in found for s in family.shapes]
    assert len(names) == len(set(names)), f"a shape name is registered twice: {names}"
    return tuple(found)


def family_for(model_type: str, model: str | None = None) -> FamilySpec:
    """The family that loads HF configs of `model_type`.

    Args:
        model_type: the config's `model_type` ("llama", "qwen2_vl", ...).
        model: what the user named (for the error message).
    """
    for family in families():
        if model_type in family.model_types:
            return family
    supported = ", ".join(t for family in families() for t in family.model_types)
    what = f"model {model!r} has architecture {model_type!r}" if model else f"architecture {model_type!r}"
    raise DossierError(f"{what}, which is not supported; supported: {supported}")


def family_named(name: str) -> FamilySpec:
    """The family called `name` ("llama", "qwen2-vl", ...)."""
    for family in families():
        if family.name == name:
            return family
    raise DossierError(f"no model family is called {name!r}; families: {', '.join(f.name for f in families())}")


@cache
def _shapes() -> dict[str, tuple[FamilySpec, dict]]:
    return {name: (family, kwargs) for family in families() for name, kwargs in family.shapes.items()}


def shape_names() -> list[str]:
    """Every random-weight shape name, family by family."""
    return list(_shapes())


def shape(name: str) -> tuple[FamilySpec, object] | None:
    """(family, HF config) of a random-weight shape, or None when `name` is not one."""
    if name not in _shapes():
        return None
    family, kwargs = _shapes()[name]
    return family, family.config(**kwargs)
