"""The studio's front door: the shared Guard (engine/web/guard.py) plus the token's cookie and security headers.

Applied to every HTTP request before any route runs:
- with a token, the request must carry it: `Authorization: Bearer TOKEN`, the `dossier_token`
  cookie, or `?token=TOKEN` (the URL `dossier studio` prints; a correct one sets the cookie,
  so the page's own requests and images carry it) -> 401 otherwise;
- without a token (loopback only), the Host header must name this machine -> 400;
- a body longer than `max_body_bytes` -> 413, whether announced by Content-Length or streamed;
- every response gets a Content-Security-Policy that admits only the studio's own files (no
  inline script, no other origin), nosniff, no framing and no referrer, and a Server-Timing
  header with the seconds the server spent before answering (`app;dur=MS`, shown by browsers'
  developer tools and read by benchmarks/bench_studio.py).
Errors are JSON `{"error": "..."}` like every other error of the studio.
"""

from __future__ import annotations

import time
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from engine.web.guard import Guard as _Guard
from engine.web.guard import bearer, send_json

__all__ = ["Guard", "TOKEN_COOKIE"]

TOKEN_COOKIE = "dossier_token"
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; "
                                 b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


class Guard(_Guard):
    """ASGI middleware around the studio app: `Guard(app, token, max_body_bytes)`."""

    secret_name = "token"

    def secret_of(self, scope, headers: dict[str, str]) -> str | None:
        given = bearer(headers)
        if given is not None:
            return given
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header carries no token
            cookie = SimpleCookie()
        if TOKEN_COOKIE in cookie:
            return cookie[TOKEN_COOKIE].value
        return _query_token(scope)

    def host_hint(self, host: str) -> str:
        return (f"Host {host[:100]!r} is not this machine; open the studio at http://127.0.0.1:PORT/ "
                "(or start it with --token to serve others)")

    def secret_hint(self, what: str) -> str:
        return (f"{what} token: open the URL `dossier studio` printed (it ends in ?token=...), "
                "or send 'Authorization: Bearer TOKEN'")

    async def send_error(self, send, status: int, message: str) -> None:
        await send_json(send, status, {"error": message}, SECURITY_HEADERS)

    def wrap_send(self, send, scope, headers: dict[str, str]):
        started = time.perf_counter()  # the checks before it take microseconds
        cookie = None
        if self.secret is not None and _query_token(scope) is not None:
            cookie = f"{TOKEN_COOKIE}={self.secret}; Path=/; HttpOnly; SameSite=Strict".encode("latin-1")

        async def wrapped(message):
            if message["type"] == "http.response.start":
                timing = f"app;dur={1000 * (time.perf_counter() - started):.2f}".encode()
                extra = SECURITY_HEADERS + [(b"server-timing", timing)] + ([(b"set-cookie", cookie)] if cookie else [])
                message = {**message, "headers": list(message.get("headers", [])) + extra}
            await send(message)

        return wrapped


def _query_token(scope) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return values[0] if values else None
