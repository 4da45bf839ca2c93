"""Dossier's engine: the inference core (`engine.core`) and, beside it, the rollout runner and
agents, evaluation, datasets and the CLI.

The core's public names are re-exported here and imported on first use, so `import engine.cli...`
does not pay for torch and transformers.
"""

import importlib

from engine.core import __all__


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("engine.core"), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
