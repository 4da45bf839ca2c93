"""Settings of `dossier serve`: where it listens, who may call it, and the limits on what a request may carry.

The engine's own settings (KV cache size, token budget, device) stay in `EngineConfig`;
this holds what only the HTTP server adds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.core.structured import SchemaLimits
from engine.web.connections import DEFAULT_BODY_TIMEOUT_S, DEFAULT_HEAD_TIMEOUT_S, DEFAULT_LIMIT_CONCURRENCY
from engine.web.guard import check_exposure, normal_origin
from tools.errors import DossierError

__all__ = ["GRAMMAR_NEW_BURST", "GRAMMAR_NEW_PER_S", "ServeConfig"]

# New structured-output grammars (schemas not seen before) the server compiles per second, and at once after a
# quiet spell: EngineConfig.grammar_new_per_s / grammar_new_burst as `dossier serve` sets them by default.
GRAMMAR_NEW_PER_S = 2.0
GRAMMAR_NEW_BURST = 4


@dataclass(slots=True)
class ServeConfig:
    # Interface to bind; anything but loopback needs `api_key`.
    host: str = "127.0.0.1"
    # TCP port (0: any free port; the bound one is printed).
    port: int = 8000
    # Secret every request must carry as `Authorization: Bearer KEY` (required off loopback).
    api_key: str | None = None
    # Names a request's "model" field may use (the first is the one /v1/models lists).
    served_model_names: tuple[str, ...] = ("default",)
    # Largest request body accepted, bytes (413 beyond it); base64 images count here.
    max_request_bytes: int = 32 * 2**20
    # Largest decoded image, bytes, and largest image area before resizing, pixels.
    max_image_bytes: int = 16 * 2**20
    max_image_pixels: int = 40_000_000
    # Most images one request may carry.
    max_images_per_request: int = 64
    # Pixels all of one request's images may declare together (checked from their headers before any is decoded;
    # a decoded pixel costs 3 bytes, so this bounds a request's images at about 200 MB).
    max_request_pixels: int = 64_000_000
    # Most messages one chat request may carry (413 beyond it, before the messages are validated).
    max_messages: int = 4096
    # Web origins (scheme://host[:port]) whose pages may call the server from a browser; any other
    # Origin header is refused with 403 (a page elsewhere must not drive a server on this machine).
    allowed_origins: tuple[str, ...] = ()
    # Conversations pinned with a `session_id` kept at once; the least recently used is closed beyond it.
    max_pinned_sessions: int = 256
    # Assistant replies remembered as the exact tokens generated, so a re-sent history hits the cache.
    reply_memory: int = 8192
    # A structured-output schema (response_format or a tool's parameters) beyond these is a 400 before it compiles:
    # its compact JSON in bytes, its enum values and its object properties, each counted over the whole schema.
    max_schema_bytes: int = 64 * 1024
    max_schema_enum_values: int = 1024
    max_schema_properties: int = 1024
    # ... and JSON objects and arrays nested in one another, levels (xgrammar's work grows with the depth's square).
    max_schema_depth: int = 64
    # A request head (request line and headers) must arrive within this many seconds of the connection opening, or
    # of its first byte on a kept-alive connection, else the connection is closed (before any key check runs).
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    # Then its body must arrive within this many seconds of the head, else the connection is closed.
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    # Open connections (and requests in progress) served at once; beyond it new requests get a 503.
    limit_concurrency: int = DEFAULT_LIMIT_CONCURRENCY

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise DossierError(f"port {self.port} is out of range (0..65535; 0 picks a free port)")
        if self.api_key is not None and not re.fullmatch(r"[\x21-\x7e]{8,256}", self.api_key):
            raise DossierError("the API key must be 8-256 printable ASCII characters without spaces, "
                               "e.g. from `openssl rand -hex 16`")
        refusal = check_exposure(self.host, self.api_key, app="the server", flag="--api-key KEY",
                                 how="send 'Authorization: Bearer KEY'")
        if refusal:
            raise DossierError(refusal)
        if not self.served_model_names or not all(n.strip() for n in self.served_model_names):
            raise DossierError("give at least one non-empty served model name")
        for name in ("max_request_bytes", "max_image_bytes", "max_image_pixels", "max_images_per_request",
                     "max_request_pixels", "max_messages", "max_pinned_sessions", "reply_memory", "max_schema_bytes",
                     "max_schema_enum_values", "max_schema_properties", "max_schema_depth", "limit_concurrency"):
            if getattr(self, name) < 1:
                raise DossierError(f"{name} must be at least 1 (got {getattr(self, name)})")
        for name in ("head_timeout_s", "body_timeout_s"):
            if getattr(self, name) <= 0:
                raise DossierError(f"{name} must be > 0 seconds (got {getattr(self, name)})")
        self.allowed_origins = tuple(self.allowed_origins)
        for origin in self.allowed_origins:
            if normal_origin(origin) is None:
                raise DossierError(f"allowed origin {origin!r} is not scheme://host[:port], e.g. https://app.example.com")

    @property
    def schema_limits(self) -> SchemaLimits:
        return SchemaLimits(self.max_schema_bytes, self.max_schema_enum_values, self.max_schema_properties,
                            self.max_schema_depth)
