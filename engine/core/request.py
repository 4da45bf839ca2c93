"""A request: one generation turn of a session, from submission to its finish reason."""

import threading
import time
from enum import Enum

from engine.core.counters import Counters
from engine.core.sampling_params import SamplingParams
from engine.core.sequence import Sequence
from tools.errors import DossierError

__all__ = ["FinishReason", "Request"]


class FinishReason(str, Enum):
    stop = "stop"  # an end-of-turn token or a stop token id (kept in the output)
    stop_string = "stop_string"  # a stop string appeared in the text
    length = "length"  # max_new_tokens reached
    cancelled = "cancelled"  # the session was closed while the request ran
    error = "error"  # the request cannot run (message in Request.error)


class Request:
    """The generated tokens and state of one `Engine.submit` call; wait on it or collect it from `step()`."""

    def __init__(
        self, request_id: int, session, sampling: SamplingParams, matcher=None, generator=None, sinks=(),
        stop_strings=None,
    ) -> None:
        seq: Sequence = session.seq
        self.request_id = request_id
        self.session = session
        self.seq = seq
        self.sampling = sampling
        self.matcher = matcher  # xgrammar GrammarMatcher when the output is constrained
        self.generator = generator  # torch.Generator for temperature sampling
        self.stop_strings = stop_strings  # detokenizer.StopStrings watching the reply, when it has stop strings
        self.prompt_len = len(seq)  # tokens the turn conditions on
        self.history_tokens = session.history_len  # tokens of earlier turns
        self.output_token_ids: list[int] = []
        self.text = ""  # decoded output, set when finished
        self.finish_reason: FinishReason | None = None
        self.error: str | None = None
        self.counters = Counters()
        self._sinks = (self.counters, *sinks)  # this request's, its session's and the engine's counters
        self.admitted = False  # prefix-matched and counted once
        self.deferred = False  # held back one step for a prefix being computed (hybrid models: its state checkpoint)
        # drafting what the grammar forces (engine/core/speculation.py): `forced_drafts` is how many of the drafts in
        # flight were forced; `forced_misses` how many times in a row the model turned down the first of them
        self.forced_drafts = 0
        self.forced_misses = 0
        self.submitted_at = time.perf_counter()
        self.first_token_at: float | None = None
        self.finished_at: float | None = None
        self._done = threading.Event()

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def is_decoding(self) -> bool:
        """Only the last sampled token is left to compute."""
        return bool(self.output_token_ids) and self.seq.num_uncomputed_tokens == 1

    def count(self, **deltas) -> None:
        """Add to this request's counters and to those of its session and engine."""
        for counters in self._sinks:
            for name, value in deltas.items():
                setattr(counters, name, getattr(counters, name) + value)

    def finish(self, reason: FinishReason, error: str | None = None) -> None:
        self.finish_reason = reason
        self.error = error
        self.finished_at = time.perf_counter()
        self._done.set()

    def wait(self, timeout: float | None = None) -> "Request":
        """Block until finished (another thread must be stepping the engine); raise on error."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.request_id} not finished after {timeout} s")
        if self.finish_reason is FinishReason.error:
            raise DossierError(self.error or "request failed")
        return self

    def __repr__(self) -> str:
        return (
            f"Request(id={self.request_id}, session={self.session.session_id}, generated={len(self.output_token_ids)}, "
            f"finish_reason={self.finish_reason and self.finish_reason.value})"
        )
