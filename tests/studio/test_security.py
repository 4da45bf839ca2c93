"""Security of the studio (issue 18, point 4): loopback by default, a token elsewhere, only corpus pages,
text never run as HTML, bounded bodies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.studio import StudioConfig, serve_in_thread
from tools.errors import DossierError

from .conftest import request

TOKEN = "s3cret-token-123"


@pytest.fixture(scope="module")
def open_studio(studio_files, tmp_path_factory):
    config = StudioConfig(studio_files.corpus, studio_files.questions, tmp_path_factory.mktemp("sec-open"), port=0)
    with serve_in_thread(config) as server:
        yield server


@pytest.fixture(scope="module")
def token_studio(studio_files, tmp_path_factory):
    config = StudioConfig(studio_files.corpus, studio_files.questions, tmp_path_factory.mktemp("sec-token"), port=0,
                          token=TOKEN, max_body_bytes=2048)
    with serve_in_thread(config) as server:
        yield server


def test_only_loopback_without_a_token(studio_files, tmp_path):
    for host in ("0.0.0.0", "192.168.1.20", "::"):
        with pytest.raises(DossierError, match="--token"):
            StudioConfig(studio_files.corpus, studio_files.questions, tmp_path, host=host)
    for host in ("127.0.0.1", "localhost", "::1"):
        StudioConfig(studio_files.corpus, studio_files.questions, tmp_path, host=host)
    StudioConfig(studio_files.corpus, studio_files.questions, tmp_path, host="0.0.0.0", token=TOKEN)
    with pytest.raises(DossierError, match="8-200 characters"):
        StudioConfig(studio_files.corpus, studio_files.questions, tmp_path, host="0.0.0.0", token="short")


def test_a_foreign_host_header_is_refused_without_a_token(open_studio):
    assert request(open_studio.url, "GET", "/api/info").status == 200
    assert request(open_studio.url, "GET", "/api/info", headers={"Host": "localhost:9"}).status == 200
    rebound = request(open_studio.url, "GET", "/api/info", headers={"Host": "attacker.example:8300"})
    assert rebound.status == 400 and "is not this machine" in rebound.json["error"]


@pytest.mark.parametrize("path", [
    "/pages/../../../etc/passwd/1.png",
    "/pages/..%2F..%2F..%2Fetc%2Fpasswd/1.png",
    "/pages/%2e%2e%2f%2e%2e%2fetc%2fpasswd/1.png",
    "/pages/%252e%252e%252fetc%252fpasswd/1.png",
    "/pages/..%5C..%5Cdossier.sqlite/1.png",
    "/pages/%2Fetc%2Fpasswd/1.png",
    "/pages//etc/passwd/1.png",
    "/pages/..%00/1.png",
    "/pages/annual-2023/..%2F..%2Fdossier.sqlite",
    "/pages/annual-2023/0.png",
    "/pages/annual-2023/4.png",
    "/pages/annual-2023/-1.png",
    "/pages/annual-2023/1e1.png",
    "/pages/annual-2023/%31.png%00",
    "/pages/ANNUAL-2023/1.png",
    "/pages/annual-2023.pdf/1.png",
    "/static/../app.py",
    "/static/..%2Fapp.py",
    "/static/%2e%2e%2fconfig.py",
    "/static/index.html",
])
def test_paths_outside_the_corpus_are_404(open_studio, path):
    reply = request(open_studio.url, "GET", path)
    assert reply.status == 404, (path, reply.status, reply.body[:200])
    assert reply.headers["content-type"] == "application/json" and b"root:" not in reply.body


def test_views_and_marks_of_pages_outside_the_corpus_are_404(open_studio):
    qid = request(open_studio.url, "POST", "/api/signin", {"name": "Probe"}).json["question"]["id"]
    for document, page in (("../corpus/dossier", 1), ("/etc/passwd", 1), ("annual-2023", 99), ("nope", 1)):
        for action in ("view", "mark"):
            body = {"question_id": qid, "document": document, "page": page}
            body |= {"via": "result"} if action == "view" else {"marked": True}
            reply = request(open_studio.url, "POST", f"/api/annotators/probe/{action}", body)
            assert reply.status == 404, (action, document, reply.body)


def test_a_real_page_renders_and_is_a_png(open_studio):
    reply = request(open_studio.url, "GET", "/pages/annual-2023/2.png")
    assert reply.status == 200 and reply.headers["content-type"] == "image/png" and reply.body[:8] == b"\x89PNG\r\n\x1a\n"
    assert "default-src 'self'" in reply.headers["content-security-policy"]


def test_every_request_needs_the_token(token_studio):
    url = token_studio.url
    for path in ("/", "/static/studio.js", "/api/info", "/pages/annual-2023/1.png", "/no/such"):
        missing = request(url, "GET", path)
        assert missing.status == 401 and "missing token" in missing.json["error"], path
        wrong = request(url, "GET", path, headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status == 401 and "wrong token" in wrong.json["error"], path
    assert request(url, "POST", "/api/signin", {"name": "Mallory"}).status == 401
    assert request(url, "GET", "/api/info", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200
    assert request(url, "GET", "/api/info", headers={"Cookie": f"dossier_token={TOKEN}"}).status == 200
    first = request(url, "GET", f"/?token={TOKEN}")  # the URL `dossier studio` prints
    assert first.status == 200 and f"dossier_token={TOKEN}" in first.headers["set-cookie"]
    assert "HttpOnly" in first.headers["set-cookie"] and "SameSite=Strict" in first.headers["set-cookie"]
    # with a token, any Host may reach it (it serves other machines)
    assert request(url, "GET", "/api/info", headers={"Authorization": f"Bearer {TOKEN}", "Host": "studio.lan"}).status == 200


def test_oversized_bodies_are_413_announced_or_streamed(token_studio):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    big = {"name": "x" * 5000}
    announced = request(token_studio.url, "POST", "/api/signin", big, headers=auth)
    assert announced.status == 413 and "over the limit of 2048 bytes" in announced.json["error"]
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(token_studio.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    chunks = (b'{"name": "' + b"y" * 1000 for _ in range(5))  # chunked: no Content-Length to check up front
    conn.request("POST", "/api/signin", body=chunks, headers={**auth, "Content-Type": "application/json"},
                 encode_chunked=True)
    streamed = conn.getresponse()
    assert streamed.status == 413 and b"over the limit" in streamed.read()
    conn.close()
    assert request(token_studio.url, "POST", "/api/signin", {"name": "Small"}, headers=auth).status == 200


def test_the_page_never_turns_data_into_html():
    """Corpus text reaches the page only through textContent: no HTML sinks in the studio's script."""
    static = Path(__file__).resolve().parents[2] / "engine" / "studio" / "static"
    script = (static / "studio.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink
    html = (static / "index.html").read_text()
    assert not re.search(r"<script>|\son\w+=|https?://", html)  # no inline script, handlers or outside resources
    css = (static / "studio.css").read_text()
    assert "http" not in css and "@import" not in css and "url(" not in css
