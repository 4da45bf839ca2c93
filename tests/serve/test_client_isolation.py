"""Issue 45, findings 7 and 8: one client can neither read another's prompts through the prefix cache
nor close or take over another's pinned session (engine/serve/clients.py).

A client is its API key plus the `cache_salt` it sends; a keyless server and a request without a
salt are the shared default client (as vLLM), which keeps re-sent conversations cached.
"""

import httpx2
import pytest

from engine.serve.app import build_app
from engine.serve.config import ServeConfig
from engine.serve.server import ServerThread

SECRET = ("You are the bank's assistant. The customer's card PIN is 4821; never reveal it. "
          "Their account number is 77-1093-55 and their balance is 12,480 euros.")
KEY = "test-key-0123456789"


def chat(url: str, content: str, headers: dict | None = None, **extra) -> dict:
    body = {"model": "tiny", "messages": [{"role": "system", "content": SECRET}, {"role": "user", "content": content}],
            "max_tokens": 4, "temperature": 0, **extra}
    reply = httpx2.post(url + "/v1/chat/completions", json=body, headers=headers or {}, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def cached(reply: dict) -> int:
    return reply["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture(scope="module")
def keyed(live):
    """A second front door on the live backend that takes an API key."""
    app = build_app(live.backend, ServeConfig(served_model_names=("tiny",), api_key=KEY))
    with ServerThread(app) as url:
        yield url


def test_finding7_a_client_cannot_probe_another_clients_prompt_through_cached_tokens(live, keyed):
    victim = {"cache_salt": "victim-3f9a1c0e5b7d2468"}
    first = chat(live.url, "What is my balance?", **victim)
    again = chat(live.url, "What is my balance?", **victim)
    assert cached(again) >= first["usage"]["prompt_tokens"] - 4  # the victim's own prefix is still reused
    # The review's attack: the victim's system prompt with guessed PINs, the cached count telling how far a guess
    # matched (32 -> 48 -> 64 of 80). Each probe is a fresh client, so only the victim's blocks could answer it.
    for guess in ("4821", "4899", "4111", "1234"):
        text = SECRET.replace("4821", guess)
        body = {"model": "tiny", "max_tokens": 4, "temperature": 0, "cache_salt": f"attacker-{guess}",
                "messages": [{"role": "system", "content": text}, {"role": "user", "content": "What is my balance?"}]}
        reply = httpx2.post(live.url + "/v1/chat/completions", json=body, timeout=120).json()
        assert cached(reply) == 0, f"guess {guess}: {cached(reply)} of {reply['usage']['prompt_tokens']} tokens cached"
    # A client that sends no salt is another client too: the victim's exact prompt finds nothing.
    assert cached(chat(live.url, "What is my balance?")) == 0
    # The API key is part of the client: the key's holders do not share with keyless clients (nor the other way)
    with_key = chat(keyed, "What is my balance?", headers={"Authorization": f"Bearer {KEY}"})
    assert cached(with_key) == 0
    key_again = chat(keyed, "What is my balance?", headers={"Authorization": f"Bearer {KEY}"})
    assert cached(key_again) >= with_key["usage"]["prompt_tokens"] - 4  # one key, no salt: one client
    shared = chat(live.url, "What is my balance? (no salt)")
    assert cached(chat(live.url, "What is my balance? (no salt)")) >= shared["usage"]["prompt_tokens"] - 4, \
        "a keyless server shares its cache among requests without a salt (the documented default)"


def test_finding8_a_client_cannot_close_or_take_over_another_clients_session(live):
    alice = {"cache_salt": "alice-8c1d44e09a7b", "session_id": "alice"}
    first = chat(live.url, "Open my statement.", **alice)
    before = live.stats()["server"]
    # Another client (no salt, or another salt) cannot close her session: to it, there is none.
    assert httpx2.delete(live.url + "/v1/sessions/alice", timeout=30).status_code == 404
    guessed = httpx2.delete(live.url + "/v1/sessions/alice", headers={"X-Cache-Salt": "guess"}, timeout=30)
    assert guessed.status_code == 404
    # Writing under her session_id makes the writer a session of its own ...
    chat(live.url, "Something else entirely.", session_id="alice")
    chat(live.url, "Something else entirely.", cache_salt="mallory", session_id="alice")
    # ... and her next turn still extends hers: everything she held is cached, nothing started over.
    history = [{"role": "system", "content": SECRET}, {"role": "user", "content": "Open my statement."},
               first["choices"][0]["message"], {"role": "user", "content": "And the next page?"}]
    body = {"model": "tiny", "messages": history, "max_tokens": 4, "temperature": 0, **alice}
    second = httpx2.post(live.url + "/v1/chat/completions", json=body, timeout=120).json()
    after = live.stats()["server"]
    assert after["pinned_reopened"] == before["pinned_reopened"], "her session was started over"
    assert after["pinned_appends"] == before["pinned_appends"] + 1
    assert cached(second) == first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"] - 1
    # She closes her own (her salt in a header); the default client's "alice" is still there to close.
    closed = httpx2.delete(live.url + "/v1/sessions/alice", headers={"X-Cache-Salt": alice["cache_salt"]}, timeout=30)
    assert closed.status_code == 200 and closed.json()["deleted"] is True
    assert httpx2.delete(live.url + "/v1/sessions/alice", timeout=30).json()["deleted"] is True
    assert httpx2.delete(live.url + "/v1/sessions/alice", headers={"X-Cache-Salt": "mallory"},
                         timeout=30).json()["deleted"] is True
