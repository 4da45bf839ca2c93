"""One test per `dossier serve` finding of issue 26 (items 7-11), each the attack the review
reproduced, on the session's tiny live server. test_stays_up.py runs them all at once."""

import base64
import io
import json
import threading
import time

import httpx2
import pytest

from engine.serve.app import build_app
from engine.serve.config import ServeConfig
from engine.serve.server import ServerThread

HONEST = {"model": "tiny", "messages": [{"role": "user", "content": "What was the revenue in 2022?"}],
          "max_tokens": 48, "temperature": 0, "ignore_eos": True}


def post(url: str, body, **kwargs) -> httpx2.Response:
    headers = kwargs.pop("headers", {"Content-Type": "application/json"})
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx2.post(url + "/v1/chat/completions", content=content, headers=headers, timeout=120, **kwargs)


def bomb_png(width: int, height: int) -> str:
    """A 1-bit PNG of one colour: a few KB that decode to width x height x 3 bytes."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("1", (width, height)).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def with_images(urls: list[str], model: str = "tiny") -> dict:
    parts = [{"type": "text", "text": "Look:"}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {"model": model, "messages": [{"role": "user", "content": parts}], "max_tokens": 2}


@pytest.fixture()
def decodes(monkeypatch):
    """Counts full image decodes (Image.open reads only the header; load() decodes)."""
    from PIL import ImageFile

    calls = []
    real = ImageFile.ImageFile.load

    def counting(self):
        calls.append(self.size)
        return real(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counting)
    return calls


@pytest.fixture(scope="module")
def roomy(live):
    """A second front door on the live backend, with a 64 MiB body limit (the default is 32 MiB)."""
    app = build_app(live.backend, ServeConfig(served_model_names=("tiny",), max_request_bytes=64 * 2**20))
    with ServerThread(app) as url:
        yield url


def test_finding7_a_tiny_temperature_does_not_fail_the_requests_in_flight(live):
    alone = post(live.url, HONEST).json()["choices"][0]["message"]["content"]
    box = {}
    honest = threading.Thread(target=lambda: box.setdefault("honest", post(live.url, HONEST)))
    honest.start()
    time.sleep(0.05)
    hostile = [post(live.url, {**HONEST, "max_tokens": 4, "temperature": t}) for t in (1e-40, 5e-324, 1e-8)]
    honest.join(timeout=120)
    assert box["honest"].status_code == 200, box["honest"].text
    assert box["honest"].json()["choices"][0]["message"]["content"] == alone
    for reply in hostile:  # below a small epsilon a temperature means greedy
        assert reply.status_code == 200, reply.text
    assert post(live.url, {**HONEST, "top_p": 0}).status_code == 400


def test_finding8_images_on_a_text_only_model_are_refused_before_decoding(live, decodes):
    reply = post(live.url, with_images([bomb_png(1900, 2000)] * 8))
    assert reply.status_code == 400 and "text-only" in reply.json()["error"]["message"], reply.text
    assert decodes == []


def test_finding8_the_image_count_and_pixel_budget_are_checked_before_decoding(vl_live, decodes):
    from engine.serve.prompt import ImageLimits, render_chat
    from engine.serve.protocol import ApiError, ChatMessage

    small = bomb_png(8, 8)
    reply = post(vl_live.url, with_images([small] * 65, "tiny-vl"))
    assert reply.status_code == 413 and "more than 64 images" in reply.json()["error"]["message"], reply.text
    reply = post(vl_live.url, with_images([bomb_png(6000, 6600)], "tiny-vl"))
    assert reply.status_code == 413 and "messages[0].content[1]" in reply.json()["error"]["message"], reply.text
    assert decodes == []
    messages = [ChatMessage(**m) for m in with_images([bomb_png(1900, 2000)] * 3)["messages"]]
    limits = ImageLimits(2**24, 4_000_000, 64, max_total_pixels=10_000_000)
    with pytest.raises(ApiError) as refused:  # each image fits, the three together do not
        render_chat(vl_live.backend.processor, messages, None, None, limits)
    assert refused.value.status == 413 and "messages[0].content[3]" in refused.value.message
    assert decodes == []


def test_finding9_cross_site_posts_are_refused(live):
    plain = post(live.url, HONEST, headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415 and "application/json" in plain.json()["error"]["message"], plain.text
    foreign = post(live.url, HONEST, headers={"Content-Type": "application/json", "Origin": "https://evil.example"})
    assert foreign.status_code == 403 and "evil.example" in foreign.json()["error"]["message"], foreign.text
    same = post(live.url, HONEST, headers={"Content-Type": "application/json; charset=utf-8", "Origin": live.url})
    assert same.status_code == 200, same.text


def test_finding9_an_allowed_origin_may_post(live):
    app = build_app(live.backend, ServeConfig(served_model_names=("tiny",), allowed_origins=("https://app.example",)))
    with ServerThread(app) as url:
        ok = post(url, HONEST, headers={"Content-Type": "application/json", "Origin": "https://app.example"})
        assert ok.status_code == 200, ok.text
        assert post(url, HONEST, headers={"Content-Type": "application/json",
                                          "Origin": "https://evil.example"}).status_code == 403


def test_finding10_a_huge_conversation_is_refused_without_stalling_the_server(roomy):
    body = json.dumps({**HONEST, "messages": [{"role": "user", "content": ""}] * 300_000})
    box = {}
    sender = threading.Thread(target=lambda: box.setdefault("reply", post(roomy, body)))
    sender.start()
    worst = 0.0
    while sender.is_alive():
        start = time.perf_counter()
        assert httpx2.get(roomy + "/health", timeout=30).status_code == 200
        worst = max(worst, time.perf_counter() - start)
        time.sleep(0.02)
    assert worst < 0.2, f"/health took {worst:.3f} s while the conversation was parsed"
    reply = box["reply"]
    assert reply.status_code == 413 and "messages" in reply.json()["error"]["message"], reply.text


@pytest.mark.parametrize("name,body,text", [
    ("deep nesting", b'{"model": "tiny", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested"),
    ("seed 2**64", {**HONEST, "seed": 2**64, "temperature": 0.7}, "seed"),
    ("NaN temperature", b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
     "temperature"),
])
def test_finding11_client_errors_are_400_not_500(live, name, body, text):
    reply = post(live.url, body)
    assert reply.status_code == 400, (name, reply.status_code, reply.text[:300])
    assert text in reply.json()["error"]["message"]
