"""Issue 45, findings 3-5: one client's structured-output schema or half-sent requests cannot stall the others.

3. A huge schema is refused before it compiles; grammars compile off the request threads, one future
   per schema, a bounded number at once, each caller waiting a bounded time.
4. Compiled grammars are kept in an LRU bounded in bytes.
5. A connection that does not finish its request head within the deadline is closed (before any key
   check), and connections beyond the cap get a 503 instead of an exhausted descriptor table.
"""

import concurrent.futures
import json
import socket
import time

import httpx2
import pytest

from tests import slow_clients
from tests.slow_clients import closed_by_server
from tools.errors import DossierError


def chat(url: str, **extra) -> httpx2.Response:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}
    return httpx2.post(url + "/v1/chat/completions", json=body | extra, timeout=120)


def enum_schema(values: int, tag: str = "") -> dict:
    return {"type": "object", "properties": {"pick": {"enum": [f"{tag}v{i}" for i in range(values)]}},
            "required": ["pick"]}


def test_finding3_a_huge_enum_is_a_400_naming_the_limit_before_it_compiles(live):
    started = time.monotonic()
    reply = chat(live.url, response_format={"type": "json_schema",
                                            "json_schema": {"name": "big", "schema": enum_schema(15_000)}})
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    assert "15,000 enum values" in message and "limit of 1,024" in message and "--max-schema-enum-values" in message
    assert time.monotonic() - started < 10
    tools = [{"type": "function", "function": {"name": "f", "parameters": enum_schema(2_000)}}]
    reply = chat(live.url, tools=tools, tool_choice="required")
    assert reply.status_code == 400 and "2,000 enum values" in reply.json()["error"]["message"]


@pytest.fixture()
def slow_compiles(monkeypatch):
    """Every grammar compile takes 1.5 s (as a large schema's would), whichever code path compiles it."""
    import xgrammar

    real = xgrammar.GrammarCompiler.compile_grammar

    def slow(self, *args, **kwargs):
        time.sleep(1.5)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(xgrammar.GrammarCompiler, "compile_grammar", slow)


def test_finding3_forty_slow_schemas_do_not_take_the_threads_a_plain_request_needs(live, slow_compiles):
    """The review's stall: 40 distinct schemas compiling one after another under one lock held every request
    thread, and a plain chat request answered after 158 s. Now they compile a few at a time off those threads,
    the rest are refused with a 503 at once, and the plain request is answered in its own time."""
    chat(live.url)  # warm
    solo = time.monotonic()
    assert chat(live.url).status_code == 200
    solo = time.monotonic() - solo
    statuses = []
    with concurrent.futures.ThreadPoolExecutor(48) as pool:
        hostile = [pool.submit(chat, live.url, response_format={
            "type": "json_schema", "json_schema": {"name": f"s{i}", "schema": enum_schema(3, tag=f"h{i}-")}})
            for i in range(40)]
        time.sleep(0.5)  # the schemas are in
        started = time.monotonic()
        plain = chat(live.url)
        plain_s = time.monotonic() - started
        statuses = sorted(f.result().status_code for f in hostile)
    assert plain.status_code == 200
    assert plain_s < max(5.0, 10 * solo), f"the plain request took {plain_s:.1f} s behind the schemas"
    assert set(statuses) <= {200, 503} and statuses.count(503) > 0, statuses  # the excess refused, not queued


def test_finding3_equal_grammars_compile_once_and_different_ones_do_not_wait_on_each_other(tiny_folder,
                                                                                         slow_compiles):
    from engine.core.structured import GrammarBusy, GrammarCache, GrammarTimeout

    cache = GrammarCache(tiny_folder[2], 400, {0}, compile_timeout_s=10, workers=2, max_pending=3, new_per_s=0)
    a, b = json.dumps(enum_schema(3, "a")), json.dumps(enum_schema(3, "b"))
    started = time.monotonic()
    futures = [cache.compile("json_schema", a) for _ in range(5)] + [cache.compile("json_schema", b)]
    assert len({id(f) for f in futures[:5]}) == 1  # one compile for the five callers of the same schema
    concurrent.futures.wait(futures)
    assert time.monotonic() - started < 2.9  # a and b compiled side by side (1.5 s each), not one after the other
    assert cache.counters["compiled"] == 2
    cache.compile("json_schema", json.dumps(enum_schema(3, "c")))
    cache.compile("json_schema", json.dumps(enum_schema(3, "d")))
    cache.compile("json_schema", json.dumps(enum_schema(3, "e")))
    with pytest.raises(GrammarBusy, match="compiling now"):
        cache.compile("json_schema", json.dumps(enum_schema(3, "f")))
    impatient = GrammarCache(tiny_folder[2], 400, {0}, compile_timeout_s=0.2)
    with pytest.raises(GrammarTimeout, match="did not compile within 0.2 s"):
        impatient.matcher("json_schema", json.dumps(enum_schema(3, "g")))
    time.sleep(1.6)
    assert impatient.matcher("json_schema", json.dumps(enum_schema(3, "g")))  # the compile went on: a retry finds it
    with pytest.raises(DossierError, match="invalid regex"):
        impatient.matcher("regex", "(unclosed")


def test_finding4_the_compiled_grammar_cache_is_bounded_in_bytes(tiny_folder):
    from engine.core.structured import GrammarCache

    cache = GrammarCache(tiny_folder[2], 400, {0}, cache_bytes=200_000, new_per_s=0)
    for i in range(150):
        cache.matcher("json_schema", json.dumps(enum_schema(4, tag=f"k{i}-")))
    assert cache.cached_bytes <= 200_000 and cache.counters["evicted"] > 0, (cache.cached_bytes, cache.counters)
    assert cache.counters["compiled"] == 150


def test_finding3_a_stream_of_new_schemas_is_refused_beyond_the_new_grammar_rate(tiny_folder):
    """40 distinct schemas in one burst used to be admitted as fast as they compiled (14 of them in a run of
    benchmarks/hostile_serve.py), and their prefill doubled an honest request's time. New grammars now pass at
    `new_per_s` in bursts of `new_burst`; a schema already compiled is never refused."""
    from engine.core.structured import GrammarBusy, GrammarCache

    now = [100.0]
    cache = GrammarCache(tiny_folder[2], 400, {0}, new_per_s=2.0, new_burst=4, clock=lambda: now[0])
    schemas = [json.dumps(enum_schema(3, tag=f"r{i}-")) for i in range(40)]
    admitted, refused = [], 0
    for schema in schemas:
        try:
            admitted.append(cache.matcher("json_schema", schema))
        except GrammarBusy as err:
            refused += 1
            assert "2 per second" in str(err) and "bursts of 4" in str(err)
    assert (len(admitted), refused) == (4, 36)
    assert all(cache.matcher("json_schema", s) for s in schemas[:4])  # cached grammars cost nothing
    now[0] += 0.5  # one new grammar's worth of time
    assert cache.matcher("json_schema", schemas[4])
    with pytest.raises(GrammarBusy):
        cache.matcher("json_schema", schemas[5])
    now[0] += 60  # a quiet minute refills the burst, no more
    assert sum(1 for s in schemas[5:15] if _admitted(cache, s)) == 4


def _admitted(cache, schema: str) -> bool:
    from engine.core.structured import GrammarBusy

    try:
        return cache.matcher("json_schema", schema) is not None
    except GrammarBusy:
        return False


def half_open(url: str, count: int):
    return slow_clients.half_open(url, count, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                              b"Content-Type: application/json\r\n")  # the head never ends


@pytest.fixture()
def strict_server(tiny_folder):
    """The tiny model behind a server with a 1 s head deadline and a cap of 60 connections."""
    from engine.serve.app import build_app
    from engine.serve.config import ServeConfig
    from engine.serve.server import ServerThread
    from tests.serve.conftest import start

    thread, backend = start(tiny_folder[0], "tiny", attention_backend="sdpa")
    config = ServeConfig(served_model_names=("tiny",), head_timeout_s=1.0, body_timeout_s=2.0, limit_concurrency=60)
    with ServerThread(build_app(backend, config)) as url:
        yield url
    backend.stop()


def test_finding5_half_sent_requests_are_closed_at_the_head_deadline(strict_server):
    sockets = half_open(strict_server, 50)
    try:
        reply = chat(strict_server)  # an honest client is served while they hang
        assert reply.status_code == 200
        started = time.monotonic()
        assert all(closed_by_server(sock, within=5) for sock in sockets), "a half-sent request was kept open"
        assert time.monotonic() - started < 5
    finally:
        for sock in sockets:
            sock.close()


def test_finding5_connections_beyond_the_cap_get_a_503_not_a_hang(strict_server):
    sockets = half_open(strict_server, 70)
    try:
        reply = chat(strict_server)
        assert reply.status_code == 503  # uvicorn's own "Service Unavailable"
        time.sleep(1.5)  # the deadline closes the half-sent ones
        assert chat(strict_server).status_code == 200
    finally:
        for sock in sockets:
            sock.close()


def test_finding5_a_slow_head_on_a_kept_alive_connection_is_closed_too(strict_server):
    host, port = strict_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        deadline, received = time.monotonic() + 60, b""
        while b"}}" not in received and time.monotonic() < deadline:  # the JSON reply ends with its usage object
            received += sock.recv(65536)
        assert received.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /health HTTP/1.1\r\n")  # a second request whose head never ends
        assert closed_by_server(sock, within=5)


def test_a_body_trickled_byte_by_byte_is_closed_at_the_body_deadline(strict_server):
    # a complete head, then a body that never finishes: before the body deadline the connection stayed open for
    # as long as the client kept sending a byte now and then
    host, port = strict_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{")
        started, closed = time.monotonic(), False
        while time.monotonic() - started < 8 and not closed:
            try:
                sock.sendall(b" ")  # one byte every half second: well inside any idle timeout
            except OSError:
                closed = True
                break
            closed = closed_by_server(sock, within=0.5)
        assert closed, "the trickled body kept its connection open past the body deadline"
        assert time.monotonic() - started < 5  # the deadline is 2 s
    assert chat(strict_server).status_code == 200


def test_the_limits_are_options_of_both_servers():
    from typer.testing import CliRunner

    from engine.cli.main import app

    serve = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    studio = CliRunner().invoke(app, ["studio", "--help"], env={"COLUMNS": "200"}).output
    for option in ("--head-timeout", "--body-timeout", "--limit-concurrency", "--max-schema-enum-values",
                   "--max-schema-bytes", "--grammar-compile-timeout"):
        assert option in serve, option
    assert "--head-timeout" in studio and "--body-timeout" in studio and "--limit-concurrency" in studio
