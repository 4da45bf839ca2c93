"""The front door of Dossier's HTTP apps (pure ASGI): secret, Host check and body-size limit, before any route runs.

`dossier serve` and `dossier studio` share it; each says only what differs (engine/serve/guard.py,
engine/studio/guard.py): where the secret may travel, what an error looks like, what every
response carries, and how to word the hints.

- With a secret, every request outside `open_paths` must carry it (`secret_of`; by default
  `Authorization: Bearer SECRET`) -> 401, compared in constant time.
- Without one (the app is then bound to loopback), the Host header must name this machine
  (127.0.0.0/8, ::1, localhost): a web page elsewhere cannot reach it through DNS rebinding -> 400.
  The header is parsed strictly: a host name or IPv4 address, or a bracketed IPv6 address, then
  at most a numeric port; anything else is refused, never guessed at.
- A browser's `Origin` header must be the app's own origin (scheme, Host) or one of
  `allowed_origins` -> 403 otherwise: a page on another site cannot post to it, even where the
  request needs no secret.
- A body over `max_body_bytes` -> 413, whether announced by Content-Length or streamed; a
  Content-Length that is not a number -> 400. The body read here is replayed to the app.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re

__all__ = ["Guard", "is_loopback", "check_exposure", "host_name", "normal_origin"]

_HOST = re.compile(r"^(?P<name>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(?P<port>[0-9]{1,5}))?$")
_ORIGIN = re.compile(r"^(?P<scheme>https?)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(?P<port>[0-9]{1,5}))?/?$",
                     re.I)
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost' (an address only this machine can reach); brackets allowed."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str | None:
    """The host part of a Host header: 'a:8000' -> 'a', '[::1]:8000' -> '[::1]'; None when it is malformed.

    Only a name (letters, digits, '.', '-', '_'), an IPv4 address or a bracketed IPv6 address,
    then at most ':' and a port number of up to 5 digits: 'localhost:1@evil.com' and
    'localhost:evil' are None.
    """
    match = _HOST.match(host_header)
    if match is None or (match.group("port") is not None and int(match.group("port")) > 65535):
        return None
    return match.group("name")


def normal_origin(origin: str) -> str | None:
    """'HTTP://Example.com:80' -> 'http://example.com': scheme://host[:port] lower-cased, default port dropped.

    None for anything else (a path, user info, 'null', another scheme).
    """
    match = _ORIGIN.match(origin.strip())
    if match is None:
        return None
    scheme, host, port = match.group("scheme").lower(), match.group("host").lower(), match.group("port")
    if port is not None and int(port) > 65535:
        return None
    if port == _DEFAULT_PORTS[scheme]:
        port = None
    return f"{scheme}://{host}" + (f":{port}" if port else "")


class _TooLarge(Exception):
    pass


class Guard:
    """ASGI middleware around an app; subclasses name the secret and shape the errors.

    Args:
        app: the wrapped ASGI app.
        secret: the shared secret, or None (then only loopback Host headers are accepted).
        max_body_bytes: the largest request body accepted.
    """

    secret_name = "token"  # what the hints call the secret
    open_paths: tuple[str, ...] = ()  # paths answered without the secret (e.g. a health check)

    def __init__(self, app, secret: str | None, max_body_bytes: int, allowed_origins: tuple[str, ...] = ()) -> None:
        self.app, self.secret, self.max_body_bytes = app, secret, max_body_bytes
        self.allowed_origins = frozenset(o for o in (normal_origin(x) for x in allowed_origins) if o is not None)

    # What a subclass says -------------------------------------------------------------------

    def secret_of(self, scope, headers: dict[str, str]) -> str | None:
        """The secret the request carries, or None; by default only `Authorization: Bearer`."""
        return bearer(headers)

    def host_hint(self, host: str) -> str:
        return f"Host {host[:100]!r} is not this machine; call it at http://127.0.0.1:PORT"

    def origin_hint(self, origin: str) -> str:
        return (f"requests from the web page at {origin[:100]!r} are not allowed (a page may only call its own "
                "origin); start the app with that origin allowed to let its pages call it")

    def secret_hint(self, what: str) -> str:
        return f"{what} {self.secret_name}: send 'Authorization: Bearer {self.secret_name.upper()}'"

    async def send_error(self, send, status: int, message: str) -> None:
        """Answer with an error; by default JSON `{"error": message}`."""
        await send_json(send, status, {"error": message})

    def wrap_send(self, send, scope, headers: dict[str, str]):
        """The `send` the app answers through (a subclass may add headers to every response)."""
        return send

    # The checks -----------------------------------------------------------------------------

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if self.secret is None:
            name = host_name(host)
            if name is None or not is_loopback(name):
                return await self.send_error(send, 400, self.host_hint(host))
        elif scope.get("path") not in self.open_paths:
            given = self.secret_of(scope, headers)
            if given is None or not hmac.compare_digest(given.encode(), self.secret.encode()):
                return await self.send_error(send, 401, self.secret_hint("missing" if given is None else "wrong"))
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, scope, host):
            return await self.send_error(send, 403, self.origin_hint(origin))
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return await self.send_error(send, 400, f"Content-Length {length[:40]!r} is not a number")
            if int(length) > self.max_body_bytes:
                return await self.send_error(send, 413, f"the request body of {length} bytes is over the limit of "
                                                        f"{self.max_body_bytes} bytes")
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                body = await self._read(receive)
            except _TooLarge:
                return await self.send_error(send, 413, f"the request body is over the limit of "
                                                        f"{self.max_body_bytes} bytes")
            receive = _replay(body, receive)
        await self.app(scope, receive, self.wrap_send(send, scope, headers))

    def _origin_allowed(self, origin: str, scope, host: str) -> bool:
        """The page's origin is this app's own (its scheme and Host header) or one allowed when it started."""
        given = normal_origin(origin)
        if given is None:
            return False  # 'null' (a sandboxed frame, a file:// page) or malformed
        own = normal_origin(f"{scope.get('scheme', 'http')}://{host}") if host_name(host) is not None else None
        return given == own or given in self.allowed_origins

    async def _read(self, receive) -> bytes:
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


def check_exposure(host: str, secret: str | None, *, app: str, flag: str, how: str) -> str | None:
    """The refusal for binding `host` without a secret (None when loopback or a secret is set).

    `app` names what would be exposed ("the server"), `flag` the option that sets the secret and
    `how` what clients must then send.
    """
    if secret is not None or is_loopback(host):
        return None
    return (f"--host {host} lets other machines reach {app}: pass {flag} too (every request must then {how}), "
            "or keep the default 127.0.0.1")


def bearer(headers: dict[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later reads see the client's disconnect

    return replay


async def send_json(send, status: int, payload: dict, extra_headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *extra_headers]})
    await send({"type": "http.response.body", "body": body})
