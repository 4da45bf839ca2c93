"""Connections before authentication: deadlines for a request's head and body, and a cap on open connections.

A client that opens connections and sends half a request head holds a descriptor each, before any
route (or the API-key check) runs: uvicorn has no deadline for reading headers, so 50 of them stayed
open 70 s past its keep-alive timeout and honest clients timed out once descriptors ran out (issue 45).

`HeadDeadlineProtocol` is uvicorn's h11 protocol with one addition: from the moment a connection
opens, or the first byte of a new request on a kept-alive one, the whole head must arrive within
`head_timeout_s`, else the connection is closed. Then its body (Content-Length or chunked) must arrive
within `body_timeout_s` of the head: a client that sends a head and trickles its body a byte at a time
would otherwise hold its connection (and the task reading it) for as long as it likes. `uvicorn_settings`
gives both apps' servers that protocol and `limit_concurrency` (connections beyond it get a 503
instead of an exhausted descriptor table), and raises the process's open-file limit to fit it.
"""

from __future__ import annotations

import logging
import resource

__all__ = ["uvicorn_settings", "head_deadline_protocol", "DEFAULT_BODY_TIMEOUT_S", "DEFAULT_HEAD_TIMEOUT_S",
           "DEFAULT_LIMIT_CONCURRENCY"]

log = logging.getLogger(__name__)

DEFAULT_HEAD_TIMEOUT_S = 10.0  # a request head (request line + headers) arrives within this, seconds
DEFAULT_BODY_TIMEOUT_S = 60.0  # then its body arrives within this, seconds (32 MiB at 4.5 Mbit/s)
DEFAULT_LIMIT_CONCURRENCY = 512  # open connections (and tasks) before new requests get a 503
_SPARE_DESCRIPTORS = 128  # files the process needs besides its connections (models, corpus, logs)


def head_deadline_protocol(head_timeout_s: float, body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S):
    """uvicorn's h11 protocol class, closing a connection whose request head, or then its body, is not complete
    within its deadline."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    # each part of a request: the h11 state the client is in while sending it, and its deadline
    parts = {"head": (h11.IDLE, head_timeout_s, "no complete request head"),
             "body": (h11.SEND_BODY, body_timeout_s, "the request body did not arrive")}

    class HeadDeadlineProtocol(H11Protocol):
        _timers = None  # part -> its running timer

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._timers = {}
            self._arm("head")

        def data_received(self, data: bytes) -> None:
            if "head" not in self._timers and self.conn.their_state is h11.IDLE:
                self._arm("head")  # the first byte of a new request on a kept-alive connection
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm("head")  # the head is complete (or the connection is done)
            if self.conn.their_state is h11.SEND_BODY:
                if "body" not in self._timers:  # the head is in, the body is coming
                    self._arm("body")
            else:
                self._disarm("body")

        def connection_lost(self, exc) -> None:
            for part in list(self._timers or ()):
                self._disarm(part)
            super().connection_lost(exc)

        def _arm(self, part: str) -> None:
            self._disarm(part)
            self._timers[part] = self.loop.call_later(parts[part][1], self._timed_out, part)

        def _disarm(self, part: str) -> None:
            timer = self._timers.pop(part, None)
            if timer is not None:
                timer.cancel()

        def _timed_out(self, part: str) -> None:
            self._timers.pop(part, None)
            state, seconds, what = parts[part]
            if self.conn.their_state is state and not self.transport.is_closing():
                log.info("closing a connection from %s: %s within %g s", self.client, what, seconds)
                self.transport.close()

    return HeadDeadlineProtocol


def uvicorn_settings(head_timeout_s: float, limit_concurrency: int,
                     body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S) -> dict:
    """Keyword arguments for `uvicorn.Config` that bound connections before authentication."""
    _raise_open_file_limit(limit_concurrency + _SPARE_DESCRIPTORS)
    return {"http": head_deadline_protocol(head_timeout_s, body_timeout_s), "limit_concurrency": limit_concurrency}


def _raise_open_file_limit(wanted: int) -> None:
    """Raise the soft descriptor limit toward `wanted` (never above the hard one), so the cap is what binds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if hard != resource.RLIM_INFINITY and hard < wanted:
        log.warning("the open-file limit (%d) is below the connection cap plus spare descriptors (%d); lower "
                    "--limit-concurrency or raise `ulimit -n`", hard, wanted)
