"""Who a request comes from: the prefix-cache namespace its KV blocks live in and the one its session_ids live in.

A shared prefix cache answers "was this prompt seen before?" to anyone who asks: its
`cached_tokens` (and its speed) let one client guess another's prompt a block at a time. So
every request is keyed by its client, and a client shares cached blocks and `session_id`s
only with itself:

- The client is the API key the request authenticated with (when the server has one) together
  with the `cache_salt` it sent (vLLM's request field). Their digest is the salt mixed into the
  hash of the first KV block (engine/core/sequence.py), so two clients never share a prefix and
  `cached_tokens` counts hits within the client's own requests only; it also names the
  client's session_ids, so `session_id: "alice"` of one client is not that of another, and
  closing or writing one never reaches another's (another's is simply not there: 404).
- A server run with one API key gives the same key to everyone it trusts, so they are one
  client unless each sends its own `cache_salt`. A client that wants isolation picks a secret
  salt (16 random bytes, hex) and sends it with every request: a guessable salt is no boundary.
- A loopback server without a key and a request without `cache_salt` use the shared default
  (no salt), as vLLM does and as the in-process agent runs do: every local client then shares
  one cache and one set of session_ids. Refusing to share by default would cost every
  re-sent conversation its prefix cache, which is what a harness relies on.

The digest, never the key or the salt, is what the engine and the pinned-session table hold.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from engine.web.guard import bearer

__all__ = ["SessionKey", "client_salt", "request_client"]


@dataclass(slots=True, frozen=True)
class SessionKey:
    """A pinned session's name as the backend keys it: the client's salt and the session_id it chose."""

    client: str | None  # the client's cache salt (None: the shared default client)
    session_id: str  # what the client sent as `session_id`

    def __str__(self) -> str:
        return self.session_id


def client_salt(api_key: str | None, cache_salt: str | None) -> str | None:
    """The cache salt of a client known by its API key and requested salt; None for the shared default.

    Args:
        api_key: the key the request authenticated with (None on a keyless server).
        cache_salt: the request's `cache_salt` field (or the DELETE route's `X-Cache-Salt` header).
    Returns:
        a hex digest of both, or None when neither is given.
    """
    if api_key is None and cache_salt is None:
        return None
    return hashlib.sha256(json.dumps(["dossier-client", api_key, cache_salt]).encode()).hexdigest()


def request_client(headers, server_api_key: str | None, cache_salt: str | None) -> str | None:
    """The cache salt of the client that sent a request with these headers (see `client_salt`).

    The key is read from the request only when the server has one (the guard has then checked
    it); on a keyless server an Authorization header means nothing and is ignored.
    """
    api_key = bearer(headers) if server_api_key is not None else None
    return client_salt(api_key, cache_salt)
