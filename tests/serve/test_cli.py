"""`dossier serve` as a user starts it: a process that prints its URL, answers, and stops on Ctrl-C."""

import os
import re
import signal
import subprocess
import sys
import time

import httpx2

from tests.conftest import ROOT


def dossier(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "engine.cli.main", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def wait_for_url(process: subprocess.Popen, pattern: str = r"at (http://127\.0\.0\.1:\d+)/v1") -> str:
    """The URL `dossier serve` prints once it listens (fails with what it printed instead)."""
    deadline, url, seen = time.monotonic() + 120, None, []
    while url is None and time.monotonic() < deadline:
        line = process.stderr.readline()
        seen.append(line)
        if not line and process.poll() is not None:
            break
        match = re.search(pattern, line)
        url = match.group(1) if match else None
    assert url, "".join(seen)
    return url


def test_serve_prints_its_url_answers_and_stops_on_ctrl_c(tiny_folder):
    process = dossier("serve", "--model", str(tiny_folder[0]), "--port", "0", "--kv-cache-gib", "0.05",
                      "--served-model-name", "tiny")
    try:
        url = wait_for_url(process, r"at (http://127\.0\.0\.1:\d+)/v1 \(model names: tiny\)")
        reply = httpx2.post(url + "/v1/chat/completions", timeout=60, json={
            "model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3, "temperature": 0})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] >= 1
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode in (0, 130, -signal.SIGINT)


def test_serve_refuses_another_host_without_an_api_key():
    process = dossier("serve", "--host", "0.0.0.0")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1
    assert "--api-key" in err and "Traceback" not in err


def test_serve_allowed_origin_lets_that_page_call_and_no_other(tiny_folder):
    process = dossier("serve", "--model", str(tiny_folder[0]), "--port", "0", "--kv-cache-gib", "0.05",
                      "--served-model-name", "tiny", "--allowed-origin", "https://app.example")
    try:
        url = wait_for_url(process)
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2, "temperature": 0}
        allowed = httpx2.post(url + "/v1/chat/completions", timeout=60, json=body,
                              headers={"Origin": "https://app.example"})
        foreign = httpx2.post(url + "/v1/chat/completions", timeout=60, json=body,
                              headers={"Origin": "https://evil.example"})
        assert allowed.status_code == 200
        assert foreign.status_code == 403
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def test_serve_refuses_a_malformed_allowed_origin_before_loading():
    process = dossier("serve", "--allowed-origin", "app.example/path")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1
    assert "allowed origin 'app.example/path'" in err and "Traceback" not in err


def test_serve_refuses_a_negative_turn_wait_before_loading():
    process = dossier("serve", "--turn-wait-ms", "-5")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1
    assert "--turn-wait-ms must be 0 (never wait) or more (got -5)" in err and "Traceback" not in err
