"""Running the studio: in the foreground for `dossier studio`, or in a thread for tests and benchmarks.

    with serve_in_thread(StudioConfig(corpus=..., questions=..., out=..., port=0)) as live:
        urllib.request.urlopen(live.url + "api/info")
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from engine.studio.app import create_app
from engine.studio.config import StudioConfig
from engine.studio.service import Studio
from tools.errors import DossierError, missing_dependency

__all__ = ["LiveStudio", "build_server", "serve_in_thread", "studio_url"]


@dataclass(slots=True)
class LiveStudio:
    """A running studio: its URL (with the token when there is one), the server and the state."""

    url: str  # e.g. http://127.0.0.1:8300/ ; ends with '/'
    port: int
    studio: Studio
    server: object  # uvicorn.Server


def studio_url(host: str, port: int, token: str | None = None) -> str:
    """The URL to open: http://HOST:PORT/ (IPv6 in brackets), with ?token=... when there is a token."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def build_server(config: StudioConfig, studio: Studio | None = None):
    """A uvicorn server for the studio (not started) and the Studio it serves."""
    try:
        import uvicorn
    except ImportError:
        raise missing_dependency("the studio's web server (uvicorn)", "pip install 'dossier[studio]'") from None
    studio = studio or Studio(config)
    app = create_app(studio)
    from engine.web.connections import uvicorn_settings

    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                                           access_log=False, server_header=False, date_header=False,
                                           timeout_graceful_shutdown=2,
                                           **uvicorn_settings(config.head_timeout_s, config.limit_concurrency,
                                                                              config.body_timeout_s)))
    return server, studio


def bound_port(server) -> int:
    """The port a started uvicorn server listens on (the chosen one when the config asked for 0)."""
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets:
            return sock.getsockname()[1]
    raise DossierError("the studio server has no listening socket")


@contextlib.contextmanager
def serve_in_thread(config: StudioConfig, studio: Studio | None = None, timeout_s: float = 60.0) -> Iterator[LiveStudio]:
    """Start the studio in a daemon thread; stop it when the block ends.

    Raises:
        DossierError: the server did not start within `timeout_s` (e.g. the port is taken).
    """
    server, studio = build_server(config, studio)
    thread = threading.Thread(target=server.run, name="dossier-studio", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise DossierError(f"the studio did not start on {config.host}:{config.port} (is the port taken?)")
        time.sleep(0.02)
    port = bound_port(server)
    try:
        yield LiveStudio(studio_url(config.host, port), port, studio, server)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
