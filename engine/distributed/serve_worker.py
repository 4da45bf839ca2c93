"""One engine of `dossier serve --ray`: a Ray actor wrapping the server's own `LocalBackend`.

The actor is asynchronous (Ray runs its methods on one event loop, many at once): `generate`
is an async generator that Ray streams to the router, first ("accepted",) or ("error", ...),
then ("tokens", [ids]) as the engine produces them and ("finished", Finished). Cancelling the
Ray task cancels the generation and frees its KV blocks. The class is plain Python (the router
wraps it with `ray.remote`), so it imports without Ray.
"""

from __future__ import annotations

import asyncio
import logging
import os

from engine.distributed.corpus_check import corpus_facts
from engine.serve.turn_wait import TURN_WAIT_S
from tools.errors import DossierError

__all__ = ["ServeWorker"]

log = logging.getLogger(__name__)


class ServeWorker:
    """An engine and its stepping thread, serving the requests the router sends here.

    Args:
        index: this worker's number (for logs and routing statistics).
        model: 'default', a local HF directory or a .gguf file (the same path on every node).
        config: the `EngineConfig`.
        max_pinned_sessions: conversations pinned by session_id kept at once on this worker.
        turn_wait_s: how long the engine may wait for the next turns of replies that just finished
            (engine/serve/turn_wait.py).
    """

    def __init__(self, index: int, model: str, config, max_pinned_sessions: int, turn_wait_s: float = TURN_WAIT_S):
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # Ray forwards stderr
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from engine.core.llm_engine import Engine
        from engine.serve.backend import LocalBackend

        self.index = index
        self.engine = Engine.from_pretrained(model, config)
        if self.engine.processor is None:
            raise DossierError(f"model {model!r} has no tokenizer; dossier serve needs a model folder or GGUF file")
        self.backend = LocalBackend(self.engine, max_pinned_sessions, turn_wait_s=turn_wait_s)
        self.backend.start()
        log.info("serve worker %d ready on %s (pid %d): %s on %s", index, os.uname().nodename, os.getpid(),
                 self.engine.adapter.name, self.engine.runner.device)

    async def describe(self) -> dict:
        stats = self.engine.stats()
        return corpus_facts(None) | {"index": self.index, "device": str(self.engine.runner.device),
                                     "name": self.engine.adapter.name, "max_context": self.backend.max_context,
                                     "max_positions": self.engine.adapter.shape.max_positions,
                                     "kv_tokens": stats["kv_blocks_total"] * stats["block_size"],
                                     "attention": stats["attention_backend"]}

    async def generate(self, prompt, sampling, pin: str | None, stream: bool):
        """Stream one generation's events (see the module docstring)."""
        from engine.serve.backend import Finished
        from engine.serve.protocol import ApiError

        loop = asyncio.get_running_loop()
        try:  # submit blocks (grammar compilation, appending the prompt): off this actor's event loop
            generation = await loop.run_in_executor(
                None, lambda: self.backend.submit(prompt, sampling, loop, pin=pin, stream=stream))
        except ApiError as err:
            yield ("error", err.status, err.message, err.param)
            return
        except DossierError as err:
            yield ("error", 400, str(err), None)
            return
        yield ("accepted",)
        try:
            async for item in generation.events():
                yield ("finished", item) if isinstance(item, Finished) else ("tokens", item)
        except asyncio.CancelledError:  # the router cancelled the Ray task: the client went away
            self.backend.cancel(generation)
            raise

    async def cached_prefix_tokens(self, prompt) -> int:
        return self.backend.cached_prefix_tokens(prompt)

    async def close_pinned(self, pin: str) -> bool:
        return self.backend.close_pinned(pin)

    async def stats(self) -> dict:
        return self.backend.stats()

    async def pid(self) -> int:
        return os.getpid()
