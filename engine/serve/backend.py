"""The server's access to an engine: submit a prompt, stream its tokens, cancel it, ask what is cached.

`ServingBackend` is the whole interface the HTTP layer uses, so a router can stand in
front of several engines (one per GPU) and pick one by `cached_prefix_tokens`.
`LocalBackend` drives one in-process `Engine`: a worker thread steps it whenever a request
is pending, and after every step hands each live request's new tokens to the event loop
that waits for them. Requests from every connection are batched by the engine's scheduler.

Without a `session_id` each request gets a fresh session, closed when it finishes; its full
blocks stay in the prefix cache, so the next turn of the same conversation (re-sent whole)
is served from there. With a `session_id` the session stays open between requests (pinned,
as the in-process runner keeps an episode's session): a request whose tokens extend the
session's appends only the new ones.

Every session is opened under its client's cache salt (`Prompt.cache_salt`), and pinned sessions
are keyed by `SessionKey` (client, session_id): clients share neither cached blocks nor session_ids
(engine/serve/clients.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

from engine.core.llm_engine import Engine
from engine.core.request import FinishReason, Request
from engine.core.sampling_params import SamplingParams
from engine.serve.clients import SessionKey
from engine.serve.prompt import Prompt
from engine.serve.protocol import ApiError
from engine.serve.turn_wait import TURN_WAIT_S, TurnWait

__all__ = ["Finished", "Generation", "LocalBackend", "ServingBackend"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Finished:
    """How a generation ended."""

    reason: FinishReason
    text: str  # decoded output (a stop string and what follows it removed)
    output_token_ids: list[int]
    prompt_tokens: int  # tokens the request conditioned on
    cached_tokens: int  # of those, served from the KV cache
    error: str | None = None
    first_token_s: float | None = None  # seconds from submission to the first token


@dataclass(eq=False)
class Generation:
    """One submitted request as the server sees it; iterate `events()` on the event loop that submitted it."""

    gen_id: int
    prompt_tokens: int
    stream: bool  # push token deltas (False: only the finish)
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    request: Request | None = None
    session: object = None
    pin: SessionKey | None = None
    sent: int = 0  # output tokens already pushed
    finished: Finished | None = None

    async def events(self):
        """Yields lists of new token ids, then one `Finished`."""
        while True:
            item = await self.queue.get()
            yield item
            if isinstance(item, Finished):
                return


class ServingBackend(Protocol):
    """What the HTTP layer needs from an engine (or from a router over several)."""

    processor: object  # the model's ChatProcessor (rendering and decoding)
    max_context: int  # longest sequence (prompt + reply) it takes: the model's context or its KV pool, the smaller

    def submit(self, prompt: Prompt, sampling: SamplingParams, loop: asyncio.AbstractEventLoop, *,
               pin: SessionKey | None = None, stream: bool = True) -> Generation:
        """Queue a request under its client's cache salt (`prompt.cache_salt`), in the pinned session `pin` if
        given (blocking call; run it off the event loop). Raises ApiError/DossierError."""

    async def prepare_structure(self, sampling: SamplingParams) -> None:
        """Have `sampling`'s grammar compiled before `submit`, waiting on the event loop, never on a thread.
        Raises DossierError (an invalid grammar: 400; a busy or slow compiler: 503)."""

    def cancel(self, generation: Generation) -> None:
        """Stop a generation and free its KV blocks (non-blocking; safe from the event loop)."""

    def cached_prefix_tokens(self, prompt: Prompt) -> int:
        """Leading tokens of `prompt` whose KV is in this engine's cache now, under `prompt.cache_salt`."""

    def close_pinned(self, pin: SessionKey) -> bool:
        """Close a pinned session; False when its client has none of that name."""

    def stats(self) -> dict:
        """Engine and server counters."""


class LocalBackend:
    """One in-process engine stepped by a worker thread.

    Args:
        engine: the engine (its processor renders and decodes).
        max_pinned_sessions: pinned conversations kept at once (least recently used closed beyond).
        on_finish: called in the worker thread with (generation, finished) before the client sees it.
        turn_wait_s: after a step that finished replies, how long the engine may wait for their next turns before it
            steps again (engine/serve/turn_wait.py); 0 never waits.
    """

    def __init__(self, engine: Engine, max_pinned_sessions: int = 256, on_finish=None,
                 turn_wait_s: float = TURN_WAIT_S) -> None:
        self.engine = engine
        self.turns = TurnWait(turn_wait_s)
        self.processor = engine.processor
        self.max_context = engine.max_context
        self.max_pinned_sessions = max_pinned_sessions
        self.on_finish = on_finish
        self._ids = itertools.count()
        self._mu = threading.Lock()  # guards the tables below (never held while waiting for the engine)
        self._wake = threading.Condition(self._mu)
        self._live: dict[int, Generation] = {}
        self._cancels: list[Generation] = []
        self._pins: OrderedDict[SessionKey, object] = OrderedDict()  # pin -> open Session, least recently used first
        self._busy_pins: set[SessionKey] = set()
        self._running = False
        self._thread: threading.Thread | None = None
        self.counters = {"requests": 0, "cancelled": 0, "errors": 0, "pinned_appends": 0, "pinned_reopened": 0,
                         "turn_waits": 0, "turn_wait_ms": 0.0}

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        from engine.core.threads import release_openmp_workers

        self._running = True
        # the engine thread does every forward from now on; this thread's OpenMP workers (it loaded the model) would
        # only make libgomp count more workers than cores and stop spinning (engine/core/threads.py)
        release_openmp_workers()
        self._thread = threading.Thread(target=self._loop, name="dossier-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._mu:
            self._running = False
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for session in list(self._pins.values()):
            session.close()
        self._pins.clear()

    # --- requests -------------------------------------------------------------------

    async def prepare_structure(self, sampling: SamplingParams) -> None:
        from starlette.concurrency import run_in_threadpool

        from engine.core.structured import GrammarTimeout

        if sampling.structure is None:
            return
        future = await run_in_threadpool(self.engine.structure_future, sampling)  # quick: starts the compile
        wrapped = asyncio.wrap_future(future)
        timeout = self.engine.config.grammar_compile_timeout_s
        done, _ = await asyncio.wait({wrapped}, timeout=timeout)  # a timeout leaves the shared compile running
        if not done:
            raise GrammarTimeout(f"the structured-output grammar did not compile within {timeout:g} s; it goes on "
                                 "compiling and a retry may find it ready (a smaller schema compiles faster)")
        wrapped.result()  # an invalid grammar raises its DossierError here

    def submit(self, prompt: Prompt, sampling: SamplingParams, loop: asyncio.AbstractEventLoop, *,
               pin: SessionKey | None = None, stream: bool = True) -> Generation:
        generation = Generation(next(self._ids), prompt.num_tokens, stream, loop)
        generation.pin = pin
        if sampling.structure is not None:
            self.engine.prepare_structure(sampling)  # compile outside the step lock
        with self._mu:
            self.turns.arrived(time.perf_counter())  # before it waits for the step in progress
            if pin is not None and pin in self._busy_pins:
                raise ApiError(409, f"session_id {str(pin)!r} already has a request in flight; wait for it, or use "
                                    "another session_id", "session_id")
            if pin is not None:
                self._busy_pins.add(pin)
        try:
            with self.engine.between_steps():  # one wait for the step lock, not one per call
                session = self._session_for(prompt, pin)
                generation.session = session
                generation.request = self.engine.submit(session, sampling)
        except BaseException:
            with self._mu:
                self._busy_pins.discard(pin)
            if pin is None and generation.session is not None:
                generation.session.close()
            elif pin is not None:
                self.close_pinned(pin)
            raise
        with self._mu:
            self.counters["requests"] += 1
            self._live[generation.gen_id] = generation
            self._wake.notify_all()
        return generation

    def _session_for(self, prompt: Prompt, pin: SessionKey | None):
        """The session to generate in: the pinned one extended by the new tokens, or a new one."""
        if pin is not None:
            with self._mu:
                session = self._pins.get(pin)
                if session is not None:
                    self._pins.move_to_end(pin)
            if session is not None:
                held = session.num_tokens
                suffix = prompt.suffix_from(held) if held < prompt.num_tokens else None
                if suffix is not None and session.is_prefix_of(prompt.token_ids, prompt.image_hashes(),
                                                               prompt.cache_salt):
                    for segment in suffix:
                        session.append_segment(segment)
                    self.counters["pinned_appends"] += 1
                    return session
                self.counters["pinned_reopened"] += 1  # the history changed: start over (the prefix cache helps)
                session.close()
        session = self.engine.open_session(prompt.cache_salt)
        try:
            for segment in prompt.segments:
                session.append_segment(segment)
        except BaseException:
            session.close()
            raise
        if pin is not None:
            with self._mu:
                self._pins[pin] = session
                self._pins.move_to_end(pin)
                evict = [p for p in self._pins if p not in self._busy_pins][: max(0, len(self._pins) - self.max_pinned_sessions)]
                closing = [self._pins.pop(p) for p in evict]
            for old in closing:
                old.close()
        return session

    def cancel(self, generation: Generation) -> None:
        with self._mu:
            if generation.finished is None:
                self._cancels.append(generation)
                self._wake.notify_all()

    def close_pinned(self, pin: SessionKey) -> bool:
        with self._mu:
            session = self._pins.pop(pin, None)
            self._busy_pins.discard(pin)
        if session is None:
            return False
        session.close()
        return True

    def cached_prefix_tokens(self, prompt: Prompt) -> int:
        return self.engine.cached_prefix_tokens(prompt.segments, prompt.cache_salt)

    def stats(self) -> dict:
        with self._mu:
            server = {**self.counters, "live_requests": len(self._live), "pinned_sessions": len(self._pins)}
        return {**self.engine.stats(), "server": server}

    # --- the worker thread ----------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._mu:
                while self._running and not self._cancels and not self._live:
                    self._wake.wait(timeout=1.0)
                if not self._running:
                    return
                cancels, self._cancels = self._cancels, []
            for generation in cancels:
                self._cancel_now(generation)
            try:
                if self.engine.has_pending():
                    self.engine.step()
            except Exception as err:  # a bug must not kill the server: fail what was running, keep serving
                log.exception("engine step failed")
                self._fail_all(f"engine step failed: {type(err).__name__}: {err}")
            replies = self._publish()
            if replies:
                self._wait_for_turns(replies)

    def _wait_for_turns(self, replies: int) -> None:
        """The step just run finished `replies` replies: hold the next step until as many requests have arrived, for
        at most what `TurnWait` allows (nothing when no request is left to step, or turns do not come back fast)."""
        ended = time.perf_counter()
        with self._mu:
            limit = self.turns.finished(ended)
            if limit <= 0 or not self._live:
                return
            target = self.counters["requests"] + replies
            self._wake.wait_for(lambda: not self._running or self._cancels or self.counters["requests"] >= target,
                                timeout=limit)
            waited = time.perf_counter() - ended
            self.turns.waited(waited)
            self.counters["turn_waits"] += 1
            self.counters["turn_wait_ms"] += round(waited * 1000, 3)

    def _publish(self) -> int:
        """Hand each live request its new tokens; returns how many replies ended (stop or length) in the step."""
        ended = 0
        with self._mu:
            live = list(self._live.values())
        for generation in live:
            request = generation.request
            if generation.stream and len(request.output_token_ids) > generation.sent:
                new = request.output_token_ids[generation.sent:]
                generation.sent += len(new)
                generation.loop.call_soon_threadsafe(generation.queue.put_nowait, list(new))
            if request.finished:
                self._finish(generation)
                ended += request.finish_reason in (FinishReason.stop, FinishReason.length)
        return ended

    def _finish(self, generation: Generation) -> None:
        request = generation.request
        first = None if request.first_token_at is None else request.first_token_at - request.submitted_at
        finished = Finished(request.finish_reason, request.text, list(request.output_token_ids),
                            generation.prompt_tokens, request.counters.tokens_cached, request.error, first)
        generation.finished = finished
        with self._mu:
            self._live.pop(generation.gen_id, None)
            if generation.pin is not None:
                self._busy_pins.discard(generation.pin)
            if finished.reason is FinishReason.error:
                self.counters["errors"] += 1
        if generation.pin is None or finished.reason in (FinishReason.error, FinishReason.cancelled):
            if generation.pin is not None:
                self.close_pinned(generation.pin)
            else:
                generation.session.close()
        if self.on_finish is not None:
            try:
                self.on_finish(generation, finished)
            except Exception:
                log.exception("on_finish hook failed")
        generation.loop.call_soon_threadsafe(generation.queue.put_nowait, finished)

    def _cancel_now(self, generation: Generation) -> None:
        if generation.finished is not None:
            return
        with self._mu:
            self.counters["cancelled"] += 1
        if generation.pin is not None:
            self.close_pinned(generation.pin)  # closing cancels the running turn and frees its blocks
        else:
            generation.session.close()
        self._finish(generation)

    def _fail_all(self, message: str) -> None:
        with self._mu:
            live = list(self._live.values())
        for generation in live:
            if not generation.request.finished:
                generation.session.close()  # takes the request out of the scheduler (as cancelled) ...
                generation.request.finish(FinishReason.error, message)  # ... and the client is told why
