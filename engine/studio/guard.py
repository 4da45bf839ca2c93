"""The studio's front door (pure ASGI): token check, Host check, body-size limit, security headers.

Applied to every HTTP request before any route runs:
- with a token, the request must carry it: `Authorization: Bearer TOKEN`, the `dossier_token`
  cookie, or `?token=TOKEN` (the URL `dossier studio` prints; a correct one sets the cookie,
  so the page's own requests and images carry it) -> 401 otherwise;
- without a token (loopback only), the Host header must name this machine (127.0.0.1,
  localhost, ::1): a web page elsewhere cannot reach the studio through DNS rebinding -> 400;
- a body longer than `max_body_bytes` -> 413, whether announced by Content-Length or streamed;
- every response gets a Content-Security-Policy that admits only the studio's own files (no
  inline script, no other origin), nosniff, no framing and no referrer, and a Server-Timing
  header with the seconds the server spent before answering (`app;dur=MS`, shown by browsers'
  developer tools and read by benchmarks/bench_studio.py).
Errors are JSON `{"error": "..."}` like every other error of the studio.
"""

from __future__ import annotations

import hmac
import json
import time
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from engine.studio.config import is_loopback

__all__ = ["Guard", "TOKEN_COOKIE"]

TOKEN_COOKIE = "dossier_token"
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; "
                                 b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


class _TooLarge(Exception):
    pass


class Guard:
    """ASGI middleware around the studio app.

    Args:
        app: the wrapped ASGI app.
        token: the shared secret, or None (then only loopback Host headers are accepted).
        max_body_bytes: the largest request body accepted.
    """

    def __init__(self, app, token: str | None, max_body_bytes: int):
        self.app, self.token, self.max_body_bytes = app, token, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        set_cookie = False
        if self.token is None:
            host = headers.get("host", "")
            hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not is_loopback(hostname):
                return await _error(send, 400, f"Host {host[:100]!r} is not this machine; open the studio at "
                                               "http://127.0.0.1:PORT/ (or start it with --token to serve others)")
        else:
            given = self._token_of(scope, headers)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                what = "missing" if given is None else "wrong"
                return await _error(send, 401, f"{what} token: open the URL `dossier studio` printed (it ends in "
                                               "?token=...), or send 'Authorization: Bearer TOKEN'")
            set_cookie = _query_token(scope) is not None
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return await _error(send, 400, f"Content-Length {length[:40]!r} is not a number")
            if int(length) > self.max_body_bytes:
                return await _error(send, 413, f"request body of {length} bytes is over the limit of "
                                               f"{self.max_body_bytes} bytes")
        try:
            body = await self._read_body(receive) if scope["method"] in ("POST", "PUT", "PATCH") else None
        except _TooLarge:
            return await _error(send, 413, f"request body is over the limit of {self.max_body_bytes} bytes")
        if body is not None:
            receive = _replay(body, receive)
        await self.app(scope, receive, self._wrap_send(send, set_cookie, started))

    def _token_of(self, scope, headers: dict) -> str | None:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header carries no token
            cookie = SimpleCookie()
        if TOKEN_COOKIE in cookie:
            return cookie[TOKEN_COOKIE].value
        return _query_token(scope)

    async def _read_body(self, receive) -> bytes:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _wrap_send(self, send, set_cookie: bool, started: float):
        token = self.token

        async def wrapped(message):
            if message["type"] == "http.response.start":
                timing = f"app;dur={1000 * (time.perf_counter() - started):.2f}".encode()
                headers = list(message.get("headers", [])) + SECURITY_HEADERS + [(b"server-timing", timing)]
                if set_cookie:
                    headers.append((b"set-cookie", f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
                                    .encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        return wrapped


def _query_token(scope) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return values[0] if values else None


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _error(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})
