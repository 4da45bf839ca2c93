"""`dossier serve`: the engine behind an OpenAI-compatible HTTP API.

`config` (limits, API key) → `protocol` (request shapes, errors) → `prompt` (messages to
token segments, exact replies remembered) → `tool_calls` (Hermes-format tools, xgrammar
structural tags) → `backend` (the engine stepped by a worker thread; the interface a
router over several engines implements) → `generate`/`chat`/`completions` (the routes'
work) → `app` (FastAPI routes, errors) → `guard` (API key, Host, body size) → `server`
(uvicorn). Public names are imported on first use, so the CLI starts fast.
"""

import importlib

__all__ = ["LocalBackend", "ServeConfig", "ServerThread", "ServingBackend", "build_app", "serve_forever"]

_HOMES = {
    "LocalBackend": "engine.serve.backend",
    "ServingBackend": "engine.serve.backend",
    "ServeConfig": "engine.serve.config",
    "ServerThread": "engine.serve.server",
    "build_app": "engine.serve.app",
    "serve_forever": "engine.serve.server",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'engine.serve' has no attribute {name!r}")
