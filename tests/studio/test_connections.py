"""Issue 45, finding 5 on the studio: half-sent requests cannot hold its connections.

A client that opens connections and never finishes a request head holds one descriptor each before
the token check runs, so a token on a public address did not help. The studio closes such a
connection at its head deadline and answers connections beyond its cap with a 503.
"""

from __future__ import annotations

import time

import pytest

from engine.studio import StudioConfig, serve_in_thread
from tests import slow_clients
from tests.slow_clients import closed_by_server

from .conftest import request

TOKEN = "conn-token-4567"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture()
def strict_studio(studio_files, tmp_path):
    """A studio with a token, a 1 s head deadline and a cap of 30 connections."""
    config = StudioConfig(studio_files.corpus, studio_files.questions, tmp_path / "out", port=0, token=TOKEN,
                          head_timeout_s=1.0, limit_concurrency=30)
    with serve_in_thread(config) as server:
        yield server


def half_open(url: str, count: int):
    """Connections that send the start of a request head (no token: it never gets that far) and stop."""
    return slow_clients.half_open(url, count, b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\n")


def test_finding5_the_studio_closes_half_sent_requests_at_its_head_deadline(strict_studio):
    sockets = half_open(strict_studio.url, 20)
    try:
        assert request(strict_studio.url, "GET", "/api/info", headers=AUTH).status == 200  # served meanwhile
        started = time.monotonic()
        assert all(closed_by_server(sock, within=5) for sock in sockets), "a half-sent request was kept open"
        assert time.monotonic() - started < 5
    finally:
        for sock in sockets:
            sock.close()


def test_finding5_studio_connections_beyond_the_cap_get_a_503_then_recover(strict_studio):
    sockets = half_open(strict_studio.url, 40)
    try:
        assert request(strict_studio.url, "GET", "/api/info", headers=AUTH).status == 503
        time.sleep(1.5)  # the deadline closes the half-sent ones
        assert request(strict_studio.url, "GET", "/api/info", headers=AUTH).status == 200
    finally:
        for sock in sockets:
            sock.close()
