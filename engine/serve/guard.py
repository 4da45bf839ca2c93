"""The server's front door (pure ASGI): API key, Host check and body-size limit, before any route runs.

- With an API key, every request but `GET /health` must send `Authorization: Bearer KEY` -> 401.
- Without one (the server is then bound to loopback), the Host header must name this machine:
  a web page elsewhere cannot reach the server through DNS rebinding -> 400.
- A body over `max_bytes` -> 413, whether announced by Content-Length or streamed.
Errors have OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import hmac
import json

from engine.serve.config import is_loopback
from engine.serve.protocol import ApiError

__all__ = ["Guard"]

OPEN_PATHS = ("/health",)


class _TooLarge(Exception):
    pass


class Guard:
    """ASGI middleware around the app.

    Args:
        app: the wrapped ASGI app.
        api_key: the shared secret, or None (then only loopback Host headers are accepted).
        max_bytes: the largest request body accepted.
    """

    def __init__(self, app, api_key: str | None, max_bytes: int) -> None:
        self.app, self.api_key, self.max_bytes = app, api_key, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.api_key is None:
            host = headers.get("host", "")
            name = host if host.endswith("]") else host.rsplit(":", 1)[0]
            if not is_loopback(name):
                return await _send(send, ApiError(400, f"Host {host[:100]!r} is not this machine; call the server at "
                                                       "http://127.0.0.1:PORT (or start it with --api-key to serve others)"))
        elif scope.get("path") not in OPEN_PATHS:
            auth = headers.get("authorization", "")
            given = auth[7:].strip() if auth.lower().startswith("bearer ") else None
            if given is None or not hmac.compare_digest(given.encode(), self.api_key.encode()):
                what = "missing" if given is None else "wrong"
                return await _send(send, ApiError(401, f"{what} API key: send 'Authorization: Bearer KEY' (the openai "
                                                       "client does this with api_key=KEY)"))
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return await _send(send, ApiError(400, f"Content-Length {length[:40]!r} is not a number"))
            if int(length) > self.max_bytes:
                return await _send(send, ApiError(413, f"the request body is {length} bytes, over the limit of "
                                                       f"{self.max_bytes} bytes (images count: send fewer or smaller)"))
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                body = await self._read(receive)
            except _TooLarge:
                return await _send(send, ApiError(413, f"the request body is over the limit of {self.max_bytes} bytes"))
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    async def _read(self, receive) -> bytes:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later reads see the client's disconnect

    return replay


async def _send(send, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    await send({"type": "http.response.start", "status": error.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
