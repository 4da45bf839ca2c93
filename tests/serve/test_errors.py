"""Bad input gets a 4xx with an OpenAI-shaped error naming what is wrong; a client that leaves frees its blocks."""

import base64
import io
import json
import time

import httpx2
import pytest

from tests.serve.conftest import Live

BASE = {"model": "tiny", "messages": [{"role": "user", "content": "What was the revenue?"}], "max_tokens": 4,
        "temperature": 0}


def png(width: int, height: int) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def image_message(url: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": url}}]}]


CASES = [
    ("unknown model", {"model": "gpt-4"}, 404, "model", "does not exist"),
    ("reply beyond the context", {"max_tokens": 5000}, 400, "max_tokens", "maximum context length is 4096"),
    ("prompt beyond the context", {"messages": [{"role": "user", "content": "revenue " * 5000}]}, 400, "messages",
     "takes at most 4096 tokens"),
    ("invalid schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}}}}}, 400, None,
     "json_schema"),
    ("schema not an object", {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 400,
     "response_format", "json_schema.schema"),
    ("tool with a bad schema", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "minLength": 9, "maxLength": 2}}}}}],
        "tool_choice": "required"}, 400, "tools", "JSON schema"),
    ("tool_choice without tools", {"tool_choice": "required"}, 400, "tool_choice", "needs a non-empty 'tools'"),
    ("image on a text-only model", {"messages": image_message(png(8, 8))}, 400, "messages[0]", "text-only"),
    ("n > 1", {"n": 2}, 400, "n", "one choice per request"),
    ("penalties", {"frequency_penalty": 0.5}, 400, "frequency_penalty", "not supported"),
    ("no messages", {"messages": []}, 400, "messages", "at least 1"),
    ("unknown role", {"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role", "Input should be"),
    ("temperature out of range", {"temperature": 7}, 400, "temperature", "less than or equal to 2"),
    ("min_tokens over max_tokens", {"min_tokens": 9}, 400, "min_tokens", "exceeds max_tokens"),
]


# Bad images reach their own checks only on a vision model (a text-only one refuses any image first).
IMAGE_CASES = [
    ("malformed base64 image", {"messages": image_message("data:image/png;base64,@@@")}, 400,
     "messages[0].content[1]", "base64"),
    ("not an image", {"messages": image_message("data:image/png;base64," + base64.b64encode(b"hello").decode())},
     400, "messages[0].content[1]", "not a readable image"),
    ("remote image URL", {"messages": image_message("https://example.com/page.png")}, 400,
     "messages[0].content[1]", "does not fetch image URLs"),
    ("too many pixels", {"messages": image_message(png(3000, 2000))}, 413, "messages[0].content[1]", "pixels"),
]


@pytest.mark.parametrize("name,change,status,param,text", IMAGE_CASES, ids=[c[0] for c in IMAGE_CASES])
def test_a_bad_image_is_a_clear_4xx(vl_live, name, change, status, param, text):
    response = httpx2.post(vl_live.url + "/v1/chat/completions", json={**BASE, "model": "tiny-vl", **change}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert text in error["message"], error
    assert error["param"] == param and error["code"] == status


@pytest.mark.parametrize("name,change,status,param,text", CASES, ids=[c[0] for c in CASES])
def test_bad_request_is_a_clear_4xx(live, name, change, status, param, text):
    response = httpx2.post(live.url + "/v1/chat/completions", json={**BASE, **change}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert text in error["message"], error
    assert error["param"] == param and error["code"] == status and error["type"]
    assert "Traceback" not in response.text


def test_malformed_bodies_and_paths(live):
    bad_json = httpx2.post(live.url + "/v1/chat/completions", content=b"{not json", timeout=30,
                           headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    too_big = httpx2.post(live.url + "/v1/chat/completions", content=b"x" * (2**20 + 10), timeout=30)
    assert too_big.status_code == 413 and "over the limit" in too_big.json()["error"]["message"]
    missing = httpx2.get(live.url + "/v1/nothing-here", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == 404
    completions = httpx2.post(live.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "echo": True})
    assert completions.status_code == 400 and completions.json()["error"]["param"] == "echo"
    empty = httpx2.post(live.url + "/v1/completions", json={"model": "tiny", "prompt": [[]]})
    assert empty.status_code == 400 and "empty" in empty.json()["error"]["message"]
    vocab = httpx2.post(live.url + "/v1/completions", json={"model": "tiny", "prompt": [99999], "max_tokens": 2})
    assert vocab.status_code == 400 and "outside the vocabulary" in vocab.json()["error"]["message"]


def test_a_host_header_from_elsewhere_is_refused(live):
    response = httpx2.get(live.url + "/v1/models", headers={"host": "evil.example.com"}, timeout=30)
    assert response.status_code == 400 and "not this machine" in response.json()["error"]["message"]


def test_api_key_is_required_when_set(live):
    from engine.serve.app import build_app
    from engine.serve.config import ServeConfig
    from engine.serve.server import ServerThread
    from tools.errors import DossierError

    with pytest.raises(DossierError, match="--api-key"):
        ServeConfig(host="0.0.0.0")
    # the same engine behind a second app that requires a key
    keyed = ServerThread(build_app(live.backend, ServeConfig(served_model_names=("tiny",), api_key="secret-key-1")))
    with keyed as url:
        assert httpx2.get(url + "/v1/models").status_code == 401
        wrong = httpx2.get(url + "/v1/models", headers={"authorization": "Bearer nope-nope"})
        assert wrong.status_code == 401 and "wrong API key" in wrong.json()["error"]["message"]
        assert httpx2.get(url + "/health").status_code == 200  # health checks need no key
        from openai import OpenAI

        client = OpenAI(base_url=url + "/v1", api_key="secret-key-1", max_retries=0)
        assert client.chat.completions.create(**BASE).usage.completion_tokens >= 1


def _wait_for(live: Live, check, seconds: float = 20.0) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        stats = live.stats()
        if check(stats) or time.monotonic() > deadline:
            return stats


def test_a_client_that_disconnects_frees_its_sequence(live):
    before = live.stats()
    cancelled = before["server"]["cancelled"]
    body = {**BASE, "max_tokens": 2000, "stream": True, "ignore_eos": True}
    with httpx2.stream("POST", live.url + "/v1/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")  # the stream has begun
        assert live.stats()["server"]["live_requests"] == 1
    # the connection is closed mid-generation; the same for a client that stops waiting for a JSON reply
    with pytest.raises(httpx2.ReadTimeout):
        httpx2.post(live.url + "/v1/chat/completions", json={**BASE, "max_tokens": 2000, "ignore_eos": True},
                    timeout=httpx2.Timeout(60, read=1.0))
    after = _wait_for(live, lambda s: s["server"]["live_requests"] == 0 and s["kv_blocks_free"] == before["kv_blocks_free"])
    assert after["server"]["cancelled"] == cancelled + 2
    assert after["kv_blocks_free"] == before["kv_blocks_free"]  # the leak counter is back where it started
    assert after["open_sessions"] == before["open_sessions"]
    assert after["counters"]["tokens_generated"] - before["counters"]["tokens_generated"] < 2 * 2000


def test_a_pinned_session_takes_one_request_at_a_time(live):
    body = {**BASE, "max_tokens": 2000, "stream": True, "ignore_eos": True, "session_id": "busy"}
    with httpx2.stream("POST", live.url + "/v1/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()  # kept: dropping the iterator would close the connection
        assert next(lines).startswith("data: ")
        second = httpx2.post(live.url + "/v1/chat/completions", json={**BASE, "session_id": "busy"}, timeout=60)
        assert second.status_code == 409 and "in flight" in second.json()["error"]["message"]
    _wait_for(live, lambda s: s["server"]["live_requests"] == 0)
    assert json.loads(httpx2.post(live.url + "/v1/chat/completions", json={**BASE, "session_id": "busy"},
                                  timeout=60).text)["usage"]["completion_tokens"] >= 1
