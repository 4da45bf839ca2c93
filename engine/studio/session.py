"""Which annotators a browser may act as: a signed cookie per annotator, issued at sign-in.

`dossier_annotator_<slug as hex>=<hmac>`: the HMAC-SHA256 of the slug under a key kept in the
studio's output folder (`.session-key`, readable only by its owner), so a session survives a
server restart and nobody can make one for another name. A request for
`/api/annotators/<slug>/...` must carry that slug's cookie; signing in under a name whose run
exists needs it too, so two people who type the same name (in any case: names fold to one slug)
cannot share a run by accident, and nobody opens another's run by typing their name. One cookie
per annotator lets a shared machine keep several people's sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from http.cookies import SimpleCookie
from pathlib import Path

__all__ = ["SESSION_COOKIE", "Sessions"]

SESSION_COOKIE = "dossier_annotator"  # prefix: the cookie's full name ends with the slug in hex


class Sessions:
    """Issues and checks annotator cookies under the key stored in `folder` (created on first use)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / ".session-key"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            self._key = bytes.fromhex(path.read_text(encoding="ascii").strip())
        else:
            self._key = secrets.token_bytes(32)
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(self._key.hex())

    def _sign(self, slug: str) -> str:
        return hmac.new(self._key, slug.encode("utf-8"), hashlib.sha256).hexdigest()

    @staticmethod
    def _name(slug: str) -> str:
        return f"{SESSION_COOKIE}_{slug.encode('utf-8').hex()}"

    def cookie(self, slug: str) -> str:
        """The Set-Cookie value letting this browser act as `slug`."""
        return f"{self._name(slug)}={self._sign(slug)}; Path=/; HttpOnly; SameSite=Strict"

    def holds(self, cookie_header: str, slug: str) -> bool:
        """Whether a request's Cookie header carries a valid session for `slug`."""
        jar = SimpleCookie()
        try:
            jar.load(cookie_header or "")
        except Exception:  # a malformed Cookie header proves nothing
            return False
        morsel = jar.get(self._name(slug))
        return morsel is not None and hmac.compare_digest(morsel.value.encode("ascii", "replace"),
                                                          self._sign(slug).encode())
