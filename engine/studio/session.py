"""Which annotators a browser may act as: a signed cookie per annotator, issued at sign-in.

`dossier_annotator_<slug as hex>=<hmac>`: the HMAC-SHA256 of the slug under a key kept in the
studio's output folder (`.session-key`, readable only by its owner), so a session survives a
server restart and nobody can make one for another name. A request for
`/api/annotators/<slug>/...` must carry that slug's cookie; signing in under a name whose run
exists needs it too (or the resume code below), so two people who type the same name (in any case: names fold to one slug)
cannot share a run by accident, and nobody opens another's run by typing their name. One cookie
per annotator lets a shared machine keep several people's sessions.

A browser that lost the cookie (another machine, cleared cookies) gets back in with the
annotator's resume code: shown once, at the sign-in that starts the run, and printed in the
studio's terminal. It is the HMAC of the slug under the same key with another label (12
base-32 characters, 60 bits, like `K7QF-3MZP-XW2D`), so it needs no storage, survives
restarts, and cannot be derived from the cookie. Signing in with the name and the code
re-binds the new browser; a wrong code is refused.
"""

from __future__ import annotations

import base64
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

    def resume_code(self, slug: str) -> str:
        """The code that lets a new browser sign in as `slug` (see the module docstring)."""
        digest = hmac.new(self._key, b"resume\0" + slug.encode("utf-8"), hashlib.sha256).digest()
        code = base64.b32encode(digest).decode("ascii")[:12]
        return "-".join(code[i:i + 4] for i in range(0, 12, 4))

    def resume_code_matches(self, slug: str, code: str) -> bool:
        """Whether `code` is `slug`'s resume code (case, spaces and dashes ignored)."""
        given = "".join(ch for ch in code.upper() if ch not in " -")
        expected = self.resume_code(slug).replace("-", "")
        return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("ascii"))

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
