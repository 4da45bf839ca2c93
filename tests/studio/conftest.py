"""A small real corpus (synthetic PDFs, ingested and indexed) and a live studio server for the studio tests."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from engine.datasets.formats import write_jsonl
from tests.pdfs import make_pdf

# the memo's text tries to run script in the page; the studio must show it as text
SCRIPT_TEXT = '<script>window.__pwned = 1</script> <img src=x onerror="window.__pwned = 2"> Quarterly memo on capital expenditure.'
DOCUMENTS = {
    "annual-2023": ["Northwind annual report 2023. Contents and letter to members.",
                    "Financial highlights. Revenue in 2023 was $48,250 thousand. Net income was $4,310 thousand.",
                    "Outlook for 2024. The board expects growth in the wholesale segment."],
    "annual-2022": ["Revenue in 2022 was $45,610 thousand. Net income was $3,905 thousand.",
                    "Capital expenditure was $2,115 thousand in 2022."],
    "memo": [SCRIPT_TEXT],
}
QUESTIONS = [
    {"id": "q1", "question": "What was Northwind's revenue in 2023?", "answer_variants": [["$48,250"], ["48,250"]],
     "evidence": [{"document": "annual-2023", "page": 2}]},
    {"id": "q2", "question": "What was the capital expenditure in 2022?", "answer_variants": [["$2,115"]],
     "evidence": [{"document": "annual-2022", "page": 2}]},
    {"id": "q3", "question": "Which segment does the board expect to grow?", "answer_variants": [["wholesale"], ["wholesale", "growth"]],
     "evidence": [{"document": "annual-2023", "page": 3}]},
    {"id": "q4", "question": "What was net income in 2022?", "answer_variants": [["$3,905"]],
     "evidence": [{"document": "annual-2022", "page": 1}]},
]


@dataclass
class StudioFiles:
    corpus: Path
    questions: Path


@pytest.fixture(scope="session")
def studio_files(tmp_path_factory) -> StudioFiles:
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import build_index

    root = tmp_path_factory.mktemp("studio")
    for name, pages in DOCUMENTS.items():
        make_pdf(root / "pdfs" / f"{name}.pdf", pages)
    ingest([root / "pdfs"], root / "corpus", IngestConfig(workers=1))
    build_index(CorpusStore(root / "corpus"))
    write_jsonl(root / "questions.jsonl", QUESTIONS)
    return StudioFiles(root / "corpus", root / "questions.jsonl")


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


SESSIONS: dict[str, str] = {}  # annotator slug -> the session cookie its last sign-in set


def request(url: str, method: str, path: str, body=None, headers: dict | None = None, raw_body: bytes | None = None) -> Reply:
    """One HTTP request with the path sent exactly as given (no client-side normalisation).

    Like a browser per annotator: a sign-in's session cookie is kept (by slug) and sent with that
    annotator's requests, unless `headers` gives a Cookie of its own.
    """
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = dict(headers or {})
    if path.startswith("/api/annotators/") and "Cookie" not in headers:
        slug = path.split("/")[3]
        if slug in SESSIONS:
            headers["Cookie"] = SESSIONS[slug]
    elif path == "/api/signin" and "Cookie" not in headers and isinstance(body, dict) and isinstance(body.get("name"), str):
        known = SESSIONS.get(body["name"].strip().casefold().replace(" ", "-"))
        if known:
            headers["Cookie"] = known
    payload = raw_body
    if body is not None:
        payload = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=payload, headers=headers)
    response = conn.getresponse()
    reply = Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    conn.close()
    cookie = reply.headers.get("set-cookie", "")
    if path == "/api/signin" and reply.status == 200 and cookie.startswith("dossier_annotator_"):
        SESSIONS[reply.json["slug"]] = cookie.split(";")[0]
    return reply
