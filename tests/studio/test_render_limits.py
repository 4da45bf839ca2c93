"""Issue 45, finding 6: the studio draws pages in a bounded worker, so a hostile page ends its request.

The page is an 8 KB PDF of Form XObjects that each draw the one below twice (2^40 text runs),
stored in the corpus as an earlier ingest with a longer deadline would have stored it.
"""

from __future__ import annotations

import threading
import time

import pytest

from engine.datasets.formats import write_jsonl
from engine.studio import StudioConfig, serve_in_thread
from engine.studio.service import Studio
from tests.corpus.xobject_bomb import store_bomb_document
from tests.pdfs import make_pdf
from tools.corpus import CorpusStore, IngestConfig, RenderSettings, ingest

from .conftest import request

DEADLINE_S = 3.0  # the render time limit the test sets (the default is 30 s)
SLACK_S = 30.0  # starting a worker process on a busy 2-core machine
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def bomb_studio(tmp_path_factory):
    from tools.search import build_index

    root = tmp_path_factory.mktemp("bomb-studio")
    make_pdf(root / "pdfs" / "annual.pdf", ["Revenue in 2023 was $48,250 thousand.", "Outlook for 2024."])
    ingest([root / "pdfs"], root / "corpus", IngestConfig())
    store = CorpusStore(root / "corpus")
    store_bomb_document(store, "bomb", text="Quarterly memo with a hostile drawing")
    build_index(store)
    write_jsonl(root / "questions.jsonl", [{"id": "q1", "question": "What was revenue in 2023?",
                                            "answer_variants": [["$48,250"]],
                                            "evidence": [{"document": "annual", "page": 1}]}])
    config = StudioConfig(root / "corpus", root / "questions.jsonl", root / "runs", port=0)
    studio = Studio(config)
    studio.render_settings = RenderSettings(dpi=config.dpi, max_pixels=config.max_pixels, timeout_s=DEADLINE_S)
    with serve_in_thread(config, studio) as server:
        yield server


def test_a_page_that_would_hang_the_renderer_answers_422_at_the_deadline(bomb_studio):
    replies = {}

    def fetch_bomb():
        start = time.monotonic()
        replies["bomb"] = request(bomb_studio.url, "GET", "/pages/bomb/1.png")
        replies["bomb_s"] = time.monotonic() - start

    hostile = threading.Thread(target=fetch_bomb)
    hostile.start()
    time.sleep(0.5)
    start = time.monotonic()
    other = request(bomb_studio.url, "GET", "/pages/annual/2.png")  # drawn by another worker meanwhile
    other_s = time.monotonic() - start
    hostile.join(DEADLINE_S + SLACK_S + 60)
    assert other.status == 200 and other.body[:8] == PNG
    assert "bomb" in replies, "the request for the hostile page never ended"
    reply = replies["bomb"]
    assert reply.status == 422, (reply.status, reply.body[:300])
    assert f"page 1 of bomb.pdf took longer than {DEADLINE_S:g} s to draw" in reply.json["error"], reply.json
    assert replies["bomb_s"] < DEADLINE_S + SLACK_S
    assert other_s < replies["bomb_s"], "an ordinary page waited for the hostile one"


def test_the_renderer_recovers_and_answers_a_known_bad_page_at_once(bomb_studio):
    first = request(bomb_studio.url, "GET", "/pages/bomb/1.png")
    assert first.status == 422
    start = time.monotonic()
    again = request(bomb_studio.url, "GET", "/pages/bomb/1.png")
    assert again.status == 422 and again.json == first.json
    assert time.monotonic() - start < 1.0  # remembered: no worker spends another deadline on it
    good = request(bomb_studio.url, "GET", "/pages/annual/1.png")
    assert good.status == 200 and good.body[:8] == PNG
