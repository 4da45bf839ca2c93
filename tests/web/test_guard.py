"""The shared front door of the HTTP apps (engine/web/guard.py), driven as raw ASGI: no server, no model."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.web.guard import Guard, check_exposure, host_name, is_loopback


async def _echo(scope, receive, send):
    message = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": message.get("body", b"")})


def call(guard, *, method="POST", path="/x", headers=(), chunks=(b"hi",)):
    """Status and body of one request through `guard`; the body arrives in `chunks`."""
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent = []

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers]}
    asyncio.run(guard(scope, receive, send))
    return sent[0]["status"], sent[1]["body"]


@pytest.mark.parametrize("host, loop", [("127.0.0.1", True), ("127.8.0.1", True), ("localhost", True), ("::1", True),
                                        ("[::1]", True), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False),
                                        ("localhost.evil.example", False), ("", False)])
def test_loopback_addresses(host, loop):
    assert is_loopback(host) is loop


def test_host_header_names():
    assert host_name("a.example:8000") == "a.example"
    assert host_name("[::1]:8000") == "[::1]" and host_name("[::1]") == "[::1]"
    assert host_name("127.0.0.1") == "127.0.0.1"


def test_exposure_needs_a_secret():
    assert check_exposure("127.0.0.1", None, app="it", flag="--key K", how="send K") is None
    assert check_exposure("0.0.0.0", "secret-1", app="it", flag="--key K", how="send K") is None
    refusal = check_exposure("0.0.0.0", None, app="the thing", flag="--key K", how="send K")
    assert "--host 0.0.0.0 lets other machines reach the thing: pass --key K" in refusal


def test_without_a_secret_only_this_machine_may_call():
    guard = Guard(_echo, None, 100)
    assert call(guard, headers=[("Host", "127.0.0.1:8000")]) == (200, b"hi")
    assert call(guard, headers=[("Host", "[::1]:8000")]) == (200, b"hi")
    status, body = call(guard, headers=[("Host", "attacker.example:8000")])
    assert status == 400 and "is not this machine" in json.loads(body)["error"]


def test_a_secret_is_required_and_compared():
    guard = Guard(_echo, "s3cret-token", 100)
    assert call(guard, headers=[("Authorization", "Bearer s3cret-token"), ("Host", "x.example")]) == (200, b"hi")
    status, body = call(guard, headers=[("Host", "x.example")])
    assert status == 401 and json.loads(body)["error"].startswith("missing token")
    status, body = call(guard, headers=[("Authorization", "Bearer nope")])
    assert status == 401 and json.loads(body)["error"].startswith("wrong token")


def test_open_paths_skip_the_secret():
    class Open(Guard):
        open_paths = ("/health",)

    assert call(Open(_echo, "s3cret-token", 100), method="GET", path="/health", chunks=(b"",))[0] == 200
    assert call(Open(_echo, "s3cret-token", 100), method="GET", path="/other", chunks=(b"",))[0] == 401


def test_bodies_over_the_limit_announced_streamed_or_malformed():
    guard = Guard(_echo, None, 10)
    host = ("Host", "localhost")
    assert call(guard, headers=[host], chunks=(b"0123", b"456789")) == (200, b"0123456789")  # replayed whole
    status, body = call(guard, headers=[host, ("Content-Length", "11")], chunks=(b"x" * 11,))
    assert status == 413 and "11 bytes is over the limit of 10 bytes" in json.loads(body)["error"]
    status, body = call(guard, headers=[host], chunks=(b"x" * 6, b"x" * 6))
    assert status == 413 and "over the limit of 10 bytes" in json.loads(body)["error"]
    status, body = call(guard, headers=[host, ("Content-Length", "ten")])
    assert status == 400 and "is not a number" in json.loads(body)["error"]


@pytest.mark.parametrize("host", ["localhost:18431@evil.com", "localhost:evil", "127.0.0.1:80:80", "localhost:99999",
                                  "[::1]x", "localhost:", ":8000", "127.0.0.1 :8000", "localhost:1/x"])
def test_finding12_host_headers_are_parsed_strictly(host):
    assert host_name(host) is None
    status, body = call(Guard(_echo, None, 100), headers=[("Host", host)])
    assert status == 400 and "is not this machine" in json.loads(body)["error"]


def test_finding12_well_formed_hosts_still_pass():
    for host in ("localhost:18431", "127.0.0.1", "[::1]:65535", "127.3.2.1:1"):
        assert call(Guard(_echo, None, 100), headers=[("Host", host)]) == (200, b"hi"), host


def test_finding9_a_foreign_origin_is_refused_unless_allowed():
    guard = Guard(_echo, None, 100, allowed_origins=("https://app.example",))
    same = [("Host", "127.0.0.1:8000"), ("Origin", "http://127.0.0.1:8000")]
    assert call(guard, headers=same) == (200, b"hi")
    assert call(guard, headers=[("Host", "127.0.0.1:8000"), ("Origin", "https://APP.example:443")]) == (200, b"hi")
    for origin in ("https://evil.example", "null", "http://127.0.0.1:9000", "http://localhost:8000"):
        status, body = call(guard, headers=[("Host", "127.0.0.1:8000"), ("Origin", origin)])
        assert status == 403 and "not allowed" in json.loads(body)["error"], origin
    keyed = Guard(_echo, "s3cret-token", 100)  # a secret does not make a foreign page welcome
    status, _ = call(keyed, headers=[("Authorization", "Bearer s3cret-token"), ("Host", "a.example"),
                                     ("Origin", "https://evil.example")])
    assert status == 403
