"""Clients that open connections and never finish a request head (issue 45, finding 5), for both servers' tests."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

__all__ = ["closed_by_server", "half_open"]


def half_open(url: str, count: int, head: bytes = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n") -> list[socket.socket]:
    """`count` connections to `url` that send the start of a request head (`head`, no blank line) and stop."""
    parts = urlsplit(url)
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
        sock.sendall(head)
        sockets.append(sock)
    return sockets


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes `sock` within `within` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True
