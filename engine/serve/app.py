"""The OpenAI-compatible HTTP app: routes, request validation and errors in OpenAI's shape.

Request bodies must be `Content-Type: application/json` (415 otherwise: a page on another site
can send `text/plain` without asking the browser first). Before a body is parsed, its JSON
values are counted from its commas and brackets (a byte count, milliseconds for the largest
body) and a body with more than 16 per message allowed plus 2 per context token is refused: parsing holds the interpreter,
so a 30 MB body of empty messages would stall every other request for a second. Parsing and
validation then run off the event loop; deep nesting is a 400, more than `max_messages`
messages a 413, before the typed model sees them.

Routes (vLLM's): `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`,
`GET /health`; ours: `GET /stats` (engine counters: KV blocks, cache hits, phases) and
`DELETE /v1/sessions/{session_id}` (close one of the caller's pinned conversations: a client that sent
`cache_salt` with its requests sends it here as the `X-Cache-Salt` header; another client's
session_id is a 404, as if it did not exist). Every error is JSON
`{"error": {"message", "type", "param", "code"}}` with a 4xx for anything the client can
fix; a traceback never reaches the client.
"""


import json
import logging
import time
from dataclasses import dataclass

from engine.serve.backend import ServingBackend
from engine.serve.config import ServeConfig
from engine.serve.prompt import ReplyMemory
from engine.serve.protocol import ApiError, ChatCompletionRequest, CompletionRequest, unsupported_fields
from tools.errors import DossierError, missing_dependency

__all__ = ["ServerState", "build_app"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ServerState:
    config: ServeConfig
    backend: ServingBackend
    memory: ReplyMemory  # exact tokens of the replies this server generated
    context: int  # longest prompt + reply accepted, tokens
    started: float  # time.time() at start


def build_app(backend: ServingBackend, config: ServeConfig):
    """The ASGI app serving `backend` (wrapped in the API-key / Host / body-size guard)."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse
        from starlette.exceptions import HTTPException  # routing's 404/405 (FastAPI's own is a subclass)
    except ImportError:
        raise missing_dependency("fastapi/uvicorn (for dossier serve)", "pip install 'dossier[serve]'") from None
    from engine.serve.chat import chat_completion
    from engine.serve.completions import completion
    from engine.serve.guard import Guard

    state = ServerState(config, backend, ReplyMemory(config.reply_memory), backend.max_context, time.time())
    app = FastAPI(title="dossier serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serve = state
    value_budget = 16 * config.max_messages + 2 * state.context  # JSON values a body may hold (a prompt of token ids)

    @app.exception_handler(ApiError)
    async def _api_error(_request, err: ApiError):
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(DossierError)
    async def _dossier_error(_request, err: DossierError):  # the engine's checks: the client's input to fix
        status = getattr(err, "status", 400)  # 503 for a grammar compiler that is busy or slow: retry later
        kind = "server_error" if status >= 500 else None
        return JSONResponse(ApiError(status, str(err), None, kind).body(), status_code=status)

    @app.exception_handler(HTTPException)
    async def _http_error(_request, err: HTTPException):
        return JSONResponse(ApiError(err.status_code, str(err.detail)).body(), status_code=err.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request, err: RequestValidationError):
        return JSONResponse(_invalid(err.errors()).body(), status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(_request, err: Exception):
        log.exception("request failed")
        return JSONResponse(ApiError(500, f"internal error: {type(err).__name__}: {err}").body(), status_code=500)

    async def parse(request: Request, model):
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise ApiError(415, f"the request body must be sent as 'Content-Type: application/json' "
                                f"(got {content_type[:60]!r})")
        raw = await request.body()
        values = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
        if values > value_budget:
            raise ApiError(413, f"the request holds about {values} JSON values, over this server's limit of "
                                f"{value_budget} (it takes at most {config.max_messages} messages and "
                                f"{state.context} tokens); send a shorter conversation")
        from starlette.concurrency import run_in_threadpool

        parsed = await run_in_threadpool(_validate, raw, model, config.max_messages)
        if parsed.model not in config.served_model_names:
            raise ApiError(404, f"the model {parsed.model!r} does not exist; this server serves "
                                f"{', '.join(repr(n) for n in config.served_model_names)}", "model", "not_found_error")
        problem = unsupported_fields(parsed)
        if problem is not None:
            raise problem
        return parsed

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": int(state.started), "owned_by": "dossier",
             "max_model_len": state.context} for name in config.served_model_names]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await chat_completion(await parse(request, ChatCompletionRequest), request, state)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await completion(await parse(request, CompletionRequest), request, state)

    @app.get("/stats")
    async def stats():
        from starlette.concurrency import run_in_threadpool

        out = await run_in_threadpool(backend.stats)
        out["server"]["reply_memory_hits"] = state.memory.hits
        return out

    @app.delete("/v1/sessions/{session_id}")
    async def close_session(session_id: str, request: Request):
        from starlette.concurrency import run_in_threadpool

        from engine.serve.clients import SessionKey, request_client

        salt = request.headers.get("x-cache-salt") or None  # in a header, not the URL: proxies log URLs
        if salt is not None and len(salt) > 256:
            raise ApiError(400, f"X-Cache-Salt is {len(salt)} characters; send at most 256", "cache_salt")
        key = SessionKey(request_client(request.headers, config.api_key, salt), session_id)
        if not await run_in_threadpool(backend.close_pinned, key):
            raise ApiError(404, f"no pinned session {session_id[:100]!r} for this client (session_ids belong to the "
                                "client that made them: send its cache_salt as the X-Cache-Salt header)", "session_id")
        return {"id": session_id, "object": "session", "deleted": True}

    return Guard(app, config.api_key, config.max_request_bytes, config.allowed_origins)


def _validate(raw: bytes, model, max_messages: int):
    """The typed request a JSON body holds (blocking: run it off the event loop); ApiError for a bad body."""
    from pydantic import ValidationError

    try:
        body = json.loads(raw)
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply to be a chat request") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON ({err})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > max_messages:
        raise ApiError(413, f"the request has {len(messages)} messages, over this server's limit of {max_messages}; "
                            "send a shorter conversation", "messages")
    try:
        return model.model_validate(body)
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply to be a chat request") from None
    except ValidationError as err:
        raise _invalid(err.errors()) from None


def _invalid(errors: list[dict]) -> ApiError:
    """A 400 naming the first invalid field and what was wrong with it."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    param = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return ApiError(400, f"{param or 'request'}: {first.get('msg', 'invalid')}{more}", param)
