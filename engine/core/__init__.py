"""The inference core: sequences, KV block manager, scheduler, model runner, attention, sampler, `Engine`.

Read it in nano-vllm's order: `sequence` → `block_manager` → `scheduler` → `model_runner`
→ `llm_engine`; `session` and `request` are the public API's handles. The public names are
imported on first use, so importing a config does not pay for torch and transformers.
"""

import importlib

from engine.core.threads import prefer_passive_waiting

prefer_passive_waiting()  # before torch loads OpenMP (a no-op when it already has); see engine/core/threads.py

__all__ = ["Counters", "Engine", "EngineConfig", "FinishReason", "Request", "SamplingParams", "Session"]

_HOMES = {
    "Counters": "engine.core.counters",
    "Engine": "engine.core.llm_engine",
    "EngineConfig": "engine.core.config",
    "FinishReason": "engine.core.request",
    "Request": "engine.core.request",
    "SamplingParams": "engine.core.sampling_params",
    "Session": "engine.core.session",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'engine.core' has no attribute {name!r}")
