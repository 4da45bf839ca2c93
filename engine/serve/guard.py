"""The server's front door: the shared Guard (engine/web/guard.py) with the API key and OpenAI-shaped errors.

- With an API key, every request but `GET /health` must send `Authorization: Bearer KEY` -> 401.
- Without one (the server is then bound to loopback), the Host header must name this machine -> 400.
- A body over `max_bytes` -> 413, whether announced by Content-Length or streamed.
Errors have OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from engine.serve.protocol import ApiError
from engine.web.guard import Guard as _Guard
from engine.web.guard import send_json

__all__ = ["Guard"]


class Guard(_Guard):
    """ASGI middleware around the server app: `Guard(app, api_key, max_bytes)`."""

    secret_name = "API key"
    open_paths = ("/health",)

    def host_hint(self, host: str) -> str:
        return (f"Host {host[:100]!r} is not this machine; call the server at http://127.0.0.1:PORT "
                "(or start it with --api-key to serve others)")

    def secret_hint(self, what: str) -> str:
        return f"{what} API key: send 'Authorization: Bearer KEY' (the openai client does this with api_key=KEY)"

    async def send_error(self, send, status: int, message: str) -> None:
        if status == 413:
            message += " (images count: send fewer or smaller)"
        error = ApiError(status, message)
        await send_json(send, error.status, error.body())
