"""The OpenAI chat/completions request shapes `dossier serve` accepts, as typed models, and its error.

Field names and meanings are OpenAI's (and vLLM's for the extras `top_k`, `min_tokens`,
`ignore_eos`, `cache_salt`); `session_id` is ours: it pins a conversation's KV cache between turns. A
parameter we cannot honour (`n` > 1, logprobs, penalties, `echo`) is refused with a 400
that names it rather than silently ignored; unknown extra fields are ignored, as vLLM does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ApiError", "ChatCompletionRequest", "ChatMessage", "CompletionRequest", "FunctionDef", "ResponseFormat",
    "ToolDef", "NamedToolChoice", "unsupported_fields",
]


class ApiError(Exception):
    """A request the server refuses: HTTP status, OpenAI error type and the offending parameter."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind or {401: "authentication_error", 404: "not_found_error", 409: "conflict_error",
                             413: "invalid_request_error", 500: "server_error"}.get(status, "invalid_request_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class FunctionDef(_Lenient):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolDef(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef


class _FunctionName(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: _FunctionName


class _JsonSchema(_Lenient):
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: _JsonSchema | None = None


class _StreamOptions(_Lenient):
    include_usage: bool = False


class _Sampling(_Lenient):
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)  # vLLM extra; -1 or 0 = off
    min_tokens: int = Field(default=0, ge=0)  # vLLM extra
    ignore_eos: bool = False  # vLLM extra
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)  # a 64-bit signed integer, as torch takes it
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: _StreamOptions | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    session_id: str | None = Field(default=None, min_length=1, max_length=256)  # ours: pin the KV cache
    # vLLM's: a secret that gives this client its own prefix cache and session_ids (engine/serve/clients.py)
    cache_salt: str | None = Field(default=None, min_length=1, max_length=256)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default for completions
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


def unsupported_fields(request: _Sampling) -> ApiError | None:
    """The first parameter set to something this server does not do, as a 400; None when all is supported."""
    checks = [
        ("n", request.n != 1, f"n={request.n}: dossier serve returns one choice per request; send n=1 "
                              "(or several requests, which are batched together)"),
        ("logprobs", bool(request.logprobs), "logprobs are not supported by dossier serve"),
        ("top_logprobs", bool(request.top_logprobs), "top_logprobs are not supported by dossier serve"),
        ("presence_penalty", request.presence_penalty != 0, "presence_penalty is not supported; leave it at 0"),
        ("frequency_penalty", request.frequency_penalty != 0, "frequency_penalty is not supported; leave it at 0"),
        ("logit_bias", bool(request.logit_bias), "logit_bias is not supported by dossier serve"),
    ]
    if isinstance(request, CompletionRequest):
        checks += [
            ("echo", request.echo, "echo is not supported by dossier serve"),
            ("suffix", request.suffix is not None, "suffix (insertion) is not supported by dossier serve"),
            ("best_of", request.best_of not in (None, 1), "best_of is not supported; send best_of=1"),
        ]
    for param, bad, message in checks:
        if bad:
            return ApiError(400, message, param)
    return None
