"""Dossier's engine: inference engine, rollout runner, agents, evaluation and CLI.

The public names are imported on first use, so `import engine.cli...` does not pay
for torch and transformers.
"""

import importlib

__all__ = ["Counters", "Engine", "EngineConfig", "FinishReason", "Request", "SamplingParams", "Session"]

_HOMES = {
    "Counters": "engine.counters",
    "Engine": "engine.llm_engine",
    "EngineConfig": "engine.config",
    "FinishReason": "engine.request",
    "Request": "engine.request",
    "SamplingParams": "engine.sampling_params",
    "Session": "engine.session",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
