"""Issue 26 acceptance, 'serve stays up': while 8 greedy requests stream, a hostile client sends in turn
NaN-inducing temperatures, image bombs, a million messages, deep nesting and cross-origin posts. Every
honest request completes with the tokens it gets alone, /health stays under 200 ms (or, on a loaded
machine, within twice its worst beside the same streams alone), and /stats shows
no leaked blocks (the session's tiny live server)."""

import json
import threading
import time

import httpx2
import pytest

from engine.serve.app import build_app
from engine.serve.config import ServeConfig
from engine.serve.server import ServerThread
from tests.serve.test_findings import bomb_png, with_images

PROMPTS = [f"Question {i}: what was the revenue of company {chr(65 + i)} in {2015 + i}?" for i in range(8)]


def honest(url: str, prompt: str) -> str:
    """A streamed greedy chat reply, joined."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 40, "temperature": 0,
            "ignore_eos": True, "stream": True}
    text = []
    with httpx2.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            text.append(event["choices"][0]["delta"].get("content") or "")
    return "".join(text)


def hostile_requests() -> list[tuple[str, dict, bytes | str]]:
    """(what, headers, body) of each attack, in the order it is sent."""
    plain = {"Content-Type": "application/json"}
    base = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 8}
    nan = b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}'
    return [
        *[("temperature", plain, json.dumps({**base, "temperature": t})) for t in (1e-40, 5e-324, 1e-30)],
        ("NaN temperature", plain, nan),
        ("image bombs", plain, json.dumps(with_images([bomb_png(6000, 6600)] * 8))),
        ("1M messages", plain, json.dumps({**base, "messages": [{"role": "user", "content": ""}] * 1_000_000}).encode()),
        ("deep nesting", plain, b'{"model": "tiny", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("cross-origin", {**plain, "Origin": "https://evil.example"}, json.dumps(base)),
        ("text/plain", {"Content-Type": "text/plain"}, json.dumps(base)),
    ]


@pytest.fixture(scope="module")
def roomy(live):
    app = build_app(live.backend, ServeConfig(served_model_names=("tiny",), max_request_bytes=64 * 2**20))
    with ServerThread(app) as url:
        yield url


def streamed_with_health_watch(url: str, during=lambda: None) -> tuple[dict[int, str], list[float]]:
    """The eight honest replies, streamed at once, and /health's latencies while `during()` runs beside them."""
    replies, latencies = {}, []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            start = time.perf_counter()
            assert httpx2.get(url + "/health", timeout=30).status_code == 200
            latencies.append(time.perf_counter() - start)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    workers = [threading.Thread(target=lambda i=i: replies.__setitem__(i, honest(url, PROMPTS[i])))
               for i in range(8)]
    for worker in workers:
        worker.start()
    time.sleep(0.5)  # the eight prefills under way
    watcher.start()
    during()
    for worker in workers:
        worker.join(timeout=120)
    stop.set()
    watcher.join()
    return replies, latencies


def test_serve_stays_up_under_a_hostile_client(live, roomy):
    attacks = hostile_requests()  # built first: the server shares this process, and json.dumps holds the GIL
    alone = [honest(live.url, p) for p in PROMPTS]
    before = live.stats()
    statuses = []

    def attack():
        for what, headers, body in attacks:
            for url in (live.url, roomy):
                reply = httpx2.post(url + "/v1/chat/completions", content=body, headers=headers, timeout=120)
                statuses.append((what, url == roomy, reply.status_code))
                assert reply.status_code < 500, (what, reply.text[:300])

    # The peer: /health beside the same eight streams with no hostile client. Server, streams and this test
    # share one process and its GIL, so on a loaded machine both phases slow down alike; what the hostile
    # client must not do is stall the server on top of that (a 33 MB body parsed on the event loop: ~1 s).
    quiet = [t for _ in range(3) for t in streamed_with_health_watch(live.url)[1]]  # the streams are short
    replies, latencies = streamed_with_health_watch(live.url, attack)
    assert [replies.get(i) for i in range(8)] == alone
    worst, worst_quiet = max(latencies), max(quiet)
    assert worst < max(0.2, 2 * worst_quiet), (
        f"/health took up to {worst:.3f} s under the hostile client ({sorted(latencies)[-5:]} of {len(latencies)}), "
        f"{worst_quiet:.3f} s beside the same streams alone ({sorted(quiet)[-5:]} of {len(quiet)})")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        after = live.stats()
        if after["server"]["live_requests"] == 0 and after["kv_blocks_free"] == before["kv_blocks_free"]:
            break
        time.sleep(0.1)
    assert after["server"]["live_requests"] == 0 and after["kv_blocks_free"] == before["kv_blocks_free"], after
    assert after["open_sessions"] == before["open_sessions"]
    refused = {what for what, _, status in statuses if status >= 400}
    assert refused >= {"NaN temperature", "image bombs", "1M messages", "deep nesting", "cross-origin", "text/plain"}
