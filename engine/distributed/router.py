"""`dossier serve --ray`: N engines (Ray actors) behind one endpoint, each request sent where its prefix is cached.

`RayServeBackend` implements the server's `ServingBackend` interface (engine/serve/backend.py),
so the HTTP app, its routes, errors and guard are the ones `dossier serve` uses; only the
engine behind them is remote. Routing, per request:
  1. a `session_id` seen before goes back to the worker that holds its pinned session;
  2. otherwise every live worker is asked how many leading tokens of this prompt its prefix
     cache holds (exact: the engine's block hashes), and the longest wins when it covers at
     least `min_cached_share` of the prompt (SGLang's cache threshold: a shared system prompt
     alone must not pull every new conversation onto the first worker that saw it);
  3. otherwise the worker with the fewest requests in flight, then the fewest routed so far.
This is the cache-aware routing of SGLang's router and Dynamo's KV router, on plain Ray
actors rather than Ray Serve: the server already has its own HTTP layer and batching, and an
exact per-request cache query costs one small RPC per worker (a router at many workers would
keep an approximate prefix tree instead). A worker that dies is dropped from routing; its
requests in flight end with an error, and conversations re-sent in full continue elsewhere.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections import OrderedDict

from engine.distributed.cluster import import_ray, start_workers, stop_workers
from engine.distributed.serve_worker import ServeWorker
from engine.serve.turn_wait import TURN_WAIT_S
from tools.errors import DossierError

__all__ = ["RayServeBackend"]

log = logging.getLogger(__name__)


class RayServeBackend:
    """A router over Ray serve workers; start it with `RayServeBackend.start(...)`, stop it with `stop()`."""

    def __init__(self, actors: list, infos: list[dict], processor, started_session: bool, max_pinned_sessions: int,
                 min_cached_share: float = 0.5):
        self.actors, self.infos, self.processor = actors, infos, processor
        self.max_context = min(info["max_context"] for info in infos)
        self.started_session = started_session
        self.alive = set(range(len(actors)))
        self.max_pinned_sessions = max_pinned_sessions
        self.min_cached_share = min_cached_share  # cached share of a prompt that routes by prefix (else by load)
        self._ids = itertools.count()
        self._mu = threading.Lock()
        self._pins: OrderedDict[str, int] = OrderedDict()  # session_id -> worker, least recently used first
        self._in_flight = [0] * len(actors)
        self._routed = [0] * len(actors)
        self.counters = {"by_session": 0, "by_prefix": 0, "by_load": 0, "worker_errors": 0}
        self.last_route: dict | None = None  # the latest decision: worker, why, cached tokens per worker

    @classmethod
    def start(cls, address: str, workers: int, gpus_per_worker: float, model: str, engine,
              max_pinned_sessions: int = 256, cpus_per_worker: float = 1.0,
              turn_wait_s: float = TURN_WAIT_S) -> RayServeBackend:
        """Join or start the cluster and start `workers` engines (each loads `model`)."""
        from models.loading import load_processor

        processor = load_processor(model)
        if processor is None:
            raise DossierError(f"model {model!r} has no tokenizer; dossier serve needs a model folder or GGUF file")
        actors, infos, started = start_workers(
            ServeWorker, address, workers, cpus_per_worker, gpus_per_worker, engine,
            lambda i, config: (i, model, config, max_pinned_sessions, turn_wait_s), max_concurrency=1000)
        return cls(actors, infos, processor, started, max_pinned_sessions)

    # --- ServingBackend -----------------------------------------------------------------

    async def prepare_structure(self, sampling) -> None:
        """Nothing here: each worker's engine compiles the grammar off its step lock, bounded by its own limits."""

    def submit(self, prompt, sampling, loop: asyncio.AbstractEventLoop, *, pin: str | None = None, stream: bool = True):
        from engine.serve.backend import Generation
        from engine.serve.protocol import ApiError

        ray = import_ray()
        worker = self._route(prompt, pin)
        events = self.actors[worker].generate.remote(prompt, sampling, pin, stream)
        try:
            first = ray.get(next(events))
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
            self._lost(worker, err)
            raise ApiError(503, f"engine worker {worker} died; retry the request", None, "server_error") from None
        if first[0] == "error":  # refused by the worker's own checks (a busy session_id, a prompt too long)
            with self._mu:
                self._in_flight[worker] -= 1
            raise ApiError(first[1], first[2], first[3])
        generation = Generation(next(self._ids), prompt.num_tokens, stream, loop)
        generation.pin = pin
        generation.session = (worker, events)  # what cancel() needs
        asyncio.run_coroutine_threadsafe(self._pump(generation, events, worker), loop)
        return generation

    def cancel(self, generation) -> None:
        if generation.finished is None and generation.session is not None:
            import_ray().cancel(generation.session[1])

    def cached_prefix_tokens(self, prompt) -> int:
        return max(self._cached(prompt).values(), default=0)

    def close_pinned(self, pin: str) -> bool:
        with self._mu:
            worker = self._pins.pop(pin, None)
        if worker is None or worker not in self.alive:
            return False
        return import_ray().get(self.actors[worker].close_pinned.remote(pin))

    def stats(self) -> dict:
        ray = import_ray()
        alive = sorted(self.alive)
        per_worker = dict(zip(alive, ray.get([self.actors[i].stats.remote() for i in alive])))
        with self._mu:
            router = {**self.counters, "routed": list(self._routed), "in_flight": list(self._in_flight),
                      "pinned_sessions": len(self._pins), "alive": alive, "last_route": self.last_route}
        server = {"requests": sum(w["server"]["requests"] for w in per_worker.values()),
                  "live_requests": sum(w["server"]["live_requests"] for w in per_worker.values()), "router": router}
        return {"server": server, "workers": [{"worker": i, "host": self.infos[i]["host"], "pid": self.infos[i]["pid"],
                                               **per_worker[i]} for i in alive]}

    def stop(self) -> None:
        stop_workers(self.actors, self.started_session)

    # --- routing --------------------------------------------------------------------------

    def _cached(self, prompt) -> dict[int, int]:
        """Cached leading tokens of `prompt` on each live worker (a dead one is dropped)."""
        ray = import_ray()
        alive = sorted(self.alive)
        refs = {i: self.actors[i].cached_prefix_tokens.remote(prompt) for i in alive}
        cached = {}
        for i, ref in refs.items():
            try:
                cached[i] = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
                self._lost(i, err)
        return cached

    def _route(self, prompt, pin: str | None) -> int:
        """The worker for this request (see the module docstring); counts it in flight there."""
        with self._mu:
            pinned = self._pins.get(pin) if pin is not None else None
        if pinned is not None and pinned in self.alive:
            worker, why, cached = pinned, "session", {}
        else:
            cached = self._cached(prompt)
            if not cached:
                from engine.serve.protocol import ApiError

                raise ApiError(503, "every engine worker has died; restart dossier serve", None, "server_error")
            best = max(cached.values())
            by_prefix = best > 0 and best >= self.min_cached_share * prompt.num_tokens
            with self._mu:
                candidates = [i for i, n in cached.items() if n == best] if by_prefix else list(cached)
                worker = min(candidates, key=lambda i: (self._in_flight[i], self._routed[i], i))
            why = "prefix" if by_prefix and len(candidates) < len(cached) else "load"
        with self._mu:
            self.counters[f"by_{why}"] += 1
            self._in_flight[worker] += 1
            self._routed[worker] += 1
            if pin is not None:
                self._pins[pin] = worker
                self._pins.move_to_end(pin)
                while len(self._pins) > self.max_pinned_sessions * len(self.actors):
                    self._pins.popitem(last=False)
            self.last_route = {"worker": worker, "why": why, "cached": {str(i): n for i, n in cached.items()}}
        return worker

    async def _pump(self, generation, events, worker: int) -> None:
        """Hand a remote generation's events to the waiting HTTP handler, on its event loop."""
        from engine.core.request import FinishReason
        from engine.serve.backend import Finished

        ray = import_ray()
        try:
            async for ref in events:
                kind, payload = await ref
                if kind == "finished":
                    generation.finished = payload
                generation.queue.put_nowait(payload)
        except ray.exceptions.TaskCancelledError:
            self._end(generation, Finished(FinishReason.cancelled, "", [], generation.prompt_tokens, 0))
        except Exception as err:  # noqa: BLE001 - a dead worker or a bug: the client gets an error, the server lives
            if isinstance(err, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)):
                self._lost(worker, err)
            with self._mu:
                self.counters["worker_errors"] += 1
            self._end(generation, Finished(FinishReason.error, "", [], generation.prompt_tokens, 0,
                                           f"engine worker {worker} failed: {type(err).__name__}"))
        finally:
            with self._mu:
                self._in_flight[worker] -= 1

    @staticmethod
    def _end(generation, finished) -> None:
        if generation.finished is None:
            generation.finished = finished
            generation.queue.put_nowait(finished)

    def _lost(self, worker: int, err: Exception) -> None:
        if worker in self.alive:
            self.alive.discard(worker)
            info = self.infos[worker]
            log.warning("serve worker %d on %s (pid %d) died (%s); routing to %d other(s)", worker, info["host"],
                        info["pid"], type(err).__name__, len(self.alive))
