"""Run the app with uvicorn: in the foreground (`dossier serve`) or in a thread (tests, benchmarks).

    backend = LocalBackend(Engine.from_pretrained("default")); backend.start()
    with ServerThread(build_app(backend, ServeConfig(port=0))) as url:
        OpenAI(base_url=url + "/v1", api_key="none").chat.completions.create(...)
"""

from __future__ import annotations

import socket
import threading
import time

from engine.serve.config import ServeConfig
from tools.errors import DossierError, missing_dependency

__all__ = ["ServerThread", "bind", "serve_forever"]


def _uvicorn():
    try:
        import uvicorn
    except ImportError:
        raise missing_dependency("uvicorn (for dossier serve)", "pip install 'dossier[serve]'") from None
    return uvicorn


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0 picks a free one); a clear error when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise DossierError(f"cannot listen on {host}:{port} ({err.strerror}); pick another --port or --host") from None
    sock.listen(2048)
    return sock


def serve_forever(app, config: ServeConfig, on_ready=None) -> None:
    """Serve until interrupted. `on_ready(url)` is called once the socket listens."""
    uvicorn = _uvicorn()
    sock = bind(config.host, config.port)
    port = sock.getsockname()[1]
    host = f"[{config.host}]" if ":" in config.host else config.host
    if on_ready is not None:
        on_ready(f"http://{host}:{port}")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_keep_alive=30, **_connection_limits(config)))
    server.run(sockets=[sock])


def _connection_limits(config: ServeConfig | None) -> dict:
    """The head deadline and connection cap (engine/web/connections.py) from the server's settings."""
    from engine.web.connections import uvicorn_settings

    config = config or ServeConfig()
    return uvicorn_settings(config.head_timeout_s, config.limit_concurrency, config.body_timeout_s)


class ServerThread:
    """The app served by uvicorn in a daemon thread on 127.0.0.1 and a free port; a context manager giving its URL."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0) -> None:
        uvicorn = _uvicorn()
        self.sock = bind(host, port)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        inner = getattr(app, "app", app)  # build_app's FastAPI app inside its Guard; its state holds the config
        state = getattr(getattr(inner, "state", None), "serve", None)
        limits = _connection_limits(getattr(state, "config", None))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **limits))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()
