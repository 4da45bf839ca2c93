"""One Ray worker: one engine, the corpus opened read-only, and a rollout runner streaming finished episodes.

The class is plain Python (the driver wraps it with `ray.remote`), so it imports without Ray.
`run(questions)` is a generator: under Ray it becomes a streaming generator and each finished
episode reaches the driver as soon as it is done, while every episode keeps its whole
conversation (and its KV cache) in this worker's engine for all its turns.
"""

from __future__ import annotations

import logging
import os
import queue
import threading

from engine.agents.backend import engine_backend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.distributed.corpus_check import corpus_facts

__all__ = ["RolloutWorker"]

log = logging.getLogger(__name__)

_COUNTS = ("steps", "tokens_generated", "tokens_prefilled", "tokens_cached")


class RolloutWorker:
    """An engine and a corpus environment serving shards of a run.

    Args:
        index: this worker's number (for logs).
        model: 'default', a local HF directory or a .gguf file (the same path on every node).
        config: the `EngineConfig`.
        settings: the run's `AgentSettings` (unresolved; resolved here for the model).
        corpus: the corpus directory (None for closed-book).
        concurrency: episodes in flight at once on this worker.
    """

    def __init__(self, index: int, model: str, config, settings, corpus: str | None, concurrency: int):
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # Ray forwards stderr
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.index, self.corpus, self.concurrency = index, corpus, concurrency
        self.env = None
        if corpus is not None:
            self.env = AgentEnv(corpus, settings.page_chars, settings.search_mode, settings.rerank, settings.late_model)
        self.engine, self.settings, self.backend = engine_backend(model, config, settings, self.env)
        log.info("worker %d ready on %s (pid %d): model %s on %s", index, os.uname().nodename, os.getpid(), model,
                 self.engine.config.resolved_device())

    def describe(self) -> dict:
        """Host, pid, device, the resolved settings and how this worker sees the corpus."""
        return corpus_facts(self.corpus) | {"index": self.index, "device": self.engine.config.resolved_device(),
                                            "settings": self.settings}

    def run(self, questions: list):
        """Run these questions' episodes; yields one event per finished episode.

        Each event: {"id", "trajectory", "prediction", "reason", "counts": {steps, tokens_*} since the last event}.
        """
        events: queue.Queue = queue.Queue()
        runner = RolloutRunner(self.backend, self.settings, self.env, None, self.concurrency,
                               record=lambda trajectory, prediction, reason: events.put(
                                   ("episode", (trajectory, prediction.to_json(), reason))))
        last = dict.fromkeys(_COUNTS, 0)

        def work():
            try:
                runner.run(questions)
            except BaseException as err:  # noqa: BLE001 - handed to the driver, which decides
                events.put(("error", err))
                return
            events.put(("end", None))

        threading.Thread(target=work, name=f"dossier-worker-{self.index}", daemon=True).start()
        while True:
            kind, payload = events.get()
            if kind == "error":
                raise payload
            if kind == "end":
                return
            trajectory, prediction, reason = payload
            # the runner thread is blocked in record() only until put(); its summary may have moved on since,
            # so counts are taken from here and can only be early, never counted twice
            now = {name: getattr(runner.summary, name) for name in _COUNTS}
            counts = {name: now[name] - last[name] for name in _COUNTS}
            last = now
            yield {"id": prediction["id"], "trajectory": trajectory, "prediction": prediction, "reason": reason,
                   "counts": counts}

    def stats(self) -> dict:
        """The engine's counters (prefix-cache hits, preemptions, ...)."""
        return self.engine.stats()["counters"]

    def pid(self) -> int:
        return os.getpid()
