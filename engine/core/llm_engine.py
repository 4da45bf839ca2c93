"""The public engine: sessions in, tokens out, many sessions batched in every step.

Step-based core, for a rollout runner that keeps hundreds of episodes in flight:

    engine = Engine.from_pretrained("default")
    requests = [engine.submit(s, SamplingParams(max_new_tokens=32)) for s in sessions]
    while engine.has_pending():
        for request in engine.step():   # finished requests of this step
            ...                         # run the tool, append its result, submit again

Submission, appends and `step` hold one lock, so tool threads may append and submit
while the main loop steps; `Session.generate` is the blocking convenience that steps
until its own turn is done.
"""

import contextlib
import dataclasses
import itertools
import logging
import threading
import time

import torch

from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig
from engine.core.counters import Counters
from engine.core.fair_lock import FairRLock
from engine.core.detokenizer import StopStrings
from engine.core.model_runner import ModelRunner, kv_blocks_for_budget
from engine.core.recurrent_state import CHECKPOINT_BLOCKS
from engine.core.request import FinishReason, Request
from engine.core.sampler import sample
from engine.core.sampling_params import SamplingParams
from engine.core.scheduler import Scheduler
from engine.core.sequence import Sequence
from engine.core.session import Session
from engine.core.speculation import FORCED_MISSES, FORCED_MOST, propose
from engine.core.structured import GrammarCache
from engine.core.window_blocks import WindowBlocks
from engine.core.threads import ThreadGovernor, available_cores
from models.base import ModelAdapter, Segment
from tools.errors import DossierError

__all__ = ["Engine"]

log = logging.getLogger(__name__)


class Engine:
    """Paged-KV, prefix-caching, continuously batching inference over one model adapter."""

    def __init__(self, adapter: ModelAdapter, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.adapter = adapter
        self.processor = adapter.processor
        self.stop_token_ids: set[int] = self.processor.stop_token_ids if self.processor else set()
        device = next(adapter.parameters()).device.type
        # the runner owns the cache: on a GPU with no size given it sizes the pool after a warm-up forward
        self.runner = ModelRunner(adapter, self.config, kv_blocks_for_budget(adapter.shape, self.config, adapter.dtype,
                                                                              device))
        num_blocks = self.runner.num_blocks
        window = None
        if self.runner.window_blocks:  # sliding-window layers: a pool that keeps each sequence's window only
            window = WindowBlocks(self.runner.window_blocks, self.config.block_size, adapter.shape.window)
        self.block_manager = BlockManager(num_blocks, self.config.block_size, self.config.enable_prefix_caching, window)
        if self.runner.recurrent is not None:  # a shared prefix needs its linear layers' state: share up to checkpoints
            self.block_manager.resumable = self.runner.recurrent.resumable
            self.block_manager.checkpoint_blocks = CHECKPOINT_BLOCKS
        self.scheduler = Scheduler(self.config, self.block_manager)
        self.scheduler.states = self.runner.recurrent  # a hybrid model's states: at most their slots held at once
        self.scheduler.whole_images = adapter.shape.bidirectional_images  # an image's rows see each other's keys
        if self.config.speculative_tokens:
            blocker = self.speculation_blocker()
            if blocker is None:
                self.scheduler.drafter = self._drafts
            else:
                log.info("draft tokens off for this model: %s", blocker)
        on_cpu = self.runner.device.type == "cpu"
        # the batch-invariant mode fixes the thread count: some matmuls' bits differ between 1 and 2 threads
        fixed_threads = self.config.cpu_threads or (available_cores() if self.runner.deterministic else None)
        self.threads = ThreadGovernor(fixed_threads) if on_cpu else None
        self.counters = Counters()
        self._lock = FairRLock()  # first come, first served: a submit waits one step, not several
        self._session_ids = itertools.count()
        self._request_ids = itertools.count()
        self._step = 0
        self._grammars: GrammarCache | None = None
        self._grammars_lock = threading.Lock()
        # Steps that computed any prompt token count as prefill steps; the rest as decode steps.
        self.phases = {"prefill_steps": 0, "prefill_time_s": 0.0, "decode_steps": 0, "decode_time_s": 0.0, "decode_tokens": 0}

    @classmethod
    def from_pretrained(cls, model: str = "default", config: EngineConfig | None = None) -> "Engine":
        """Load `model` ("default", a shape name, a local HF directory or a .gguf file) and build an engine."""
        from models.loading import load_adapter

        from engine.core.dtypes import AUTO_INT8_FROM

        config = config or EngineConfig()
        adapter = load_adapter(
            model, device=config.resolved_device(), dtype=config.resolved_dtype(),
            quantization=config.resolved_quantization(), quantization_group_size=config.quantization_group_size,
            min_pixels=config.image_min_pixels, max_pixels=config.image_max_pixels, lora=config.lora,
            quantize_from=AUTO_INT8_FROM if config.quantization == "auto" else 0,
        )
        if config.quantization == "auto":  # the engine keeps the concrete choice (runs record it)
            config = dataclasses.replace(config, quantization=adapter.quantization)
        return cls(adapter, config)

    # --- sessions ----------------------------------------------------------------

    @property
    def max_context(self) -> int:
        """The longest conversation (prompt plus reply) the engine takes, tokens: the model's context, the KV pool's
        or `max_model_len`, the smallest (one place: the runner sizes the pool by it)."""
        return self.runner.max_context

    @contextlib.contextmanager
    def between_steps(self):
        """No step runs inside this block: several session calls (open, append, submit) happen as one, waiting for
        the step lock once (it is handed over first come, first served), not once per call."""
        with self._lock:
            yield

    def cached_prefix_tokens(self, segments, cache_salt: str | None = None) -> int:
        """Leading tokens of a conversation made of `segments` whose KV is in the prefix cache now, under
        `cache_salt`'s namespace (nothing is allocated or pinned)."""
        seq = Sequence(-1, self.config.block_size, cache_salt)
        for segment in segments:
            seq.append(segment.token_ids, [0] * len(segment.token_ids), 0, segment.mm_items)
        with self._lock:
            return self.block_manager.cached_prefix_tokens(seq)

    def open_session(self, cache_salt: str | None = None) -> Session:
        """A new, empty conversation.

        Args:
            cache_salt: its prefix-cache namespace: it shares cached blocks only with sessions of the
                same salt. None (in-process runs) is the one shared namespace; a server gives each
                client its own, so no client can probe what another's prompts cached.
        """
        with self._lock:
            session_id = next(self._session_ids)
            seq = Sequence(session_id, self.config.block_size, cache_salt)
            self.scheduler.sequences[session_id] = seq
            return Session(self, session_id, seq)

    def _append(self, session: Session, segment: Segment) -> None:
        with self._lock:
            self._check_open(session)
            if session.request is not None:
                raise DossierError(f"session {session.session_id} is generating; wait for its request before appending")
            vocab = self.adapter.shape.vocab_size
            bad = [t for t in segment.token_ids if not 0 <= t < vocab]
            if bad:
                raise DossierError(f"token ids {bad[:5]} are outside the vocabulary of {self.adapter.name} (0..{vocab - 1})")
            self.adapter.check_segment(segment)
            positions, next_position = self.adapter.segment_positions(segment, session.seq.next_position)
            session.seq.append(segment.token_ids, positions, next_position, segment.mm_items)

    def _close(self, session: Session) -> None:
        with self._lock:
            if session.closed:
                return
            if session.request is not None:
                self.scheduler.remove(session.request)
                session.request.finish(FinishReason.cancelled)
                session.request = None
            self.block_manager.release(session.seq)
            self.runner.forget(session.seq.seq_id)
            del self.scheduler.sequences[session.session_id]
            session.closed = True

    def _check_open(self, session: Session) -> None:
        if session.closed:
            raise DossierError(f"session {session.session_id} is closed")
        if session.engine is not self:
            raise DossierError(f"session {session.session_id} belongs to another engine")

    # --- requests ----------------------------------------------------------------

    def submit(self, session: Session, sampling: SamplingParams | None = None) -> Request:
        """Queue one generation turn for `session`; returns its request (collect it from `step()` or `wait()`)."""
        sampling = sampling or SamplingParams()
        # the grammar compiles (or comes from the cache) before the step lock: a slow one stalls only this caller
        matcher = self._grammar_cache().matcher(*sampling.structure) if sampling.structure is not None else None
        with self._lock:
            self._check_open(session)
            if session.request is not None:
                raise DossierError(f"session {session.session_id} already has a turn in flight")
            if len(session.seq) == 0:
                raise DossierError(f"session {session.session_id} is empty; append a message or tokens first")
            longest = len(session.seq) + sampling.max_new_tokens
            if longest > self.adapter.shape.max_positions:
                raise DossierError(
                    f"session {session.session_id} would reach {longest} tokens, beyond the model's "
                    f"{self.adapter.shape.max_positions}-token context"
                )
            if self.block_manager.blocks_for(longest) > self.block_manager.num_blocks:
                raise DossierError(
                    f"session {session.session_id} would reach {longest} tokens but the KV pool holds "
                    f"{self.block_manager.num_blocks * self.config.block_size}; raise EngineConfig.kv_cache_gib"
                )
            if sampling.stop and self.processor is None:
                raise DossierError(f"stop strings need a tokenizer; model {self.adapter.name!r} has none (use stop_token_ids)")
            generator = None
            request_id = next(self._request_ids)
            if not sampling.greedy:
                seed = sampling.seed if sampling.seed is not None else self.config.seed * 1_000_003 + request_id
                generator = torch.Generator(device=self.runner.device).manual_seed(seed)  # draws where the logits are
            stop_strings = StopStrings(self.processor.decode, sampling.stop) if sampling.stop else None
            request = Request(
                request_id, session, sampling, matcher, generator, sinks=(session.counters, self.counters),
                stop_strings=stop_strings,
            )
            session.request = request
            self.scheduler.add(request)
            return request

    def has_pending(self) -> bool:
        """True while any submitted request is unfinished."""
        with self._lock:
            return self.scheduler.has_work()

    def step(self) -> list[Request]:
        """Run one forward step over all active requests; return the requests that finished in it."""
        with self._lock, torch.inference_mode():
            started = time.perf_counter()
            self._step += 1
            chunks, failed = self.scheduler.schedule(self._step)
            for request in failed:
                request.session.request = None
            if not chunks:
                return failed
            if self.threads is not None:
                self.threads.apply()  # one thread per free core: a busy core stalls every parallel region
            try:
                logits = self.runner.run(chunks)
            finally:
                drafted = [chunk for chunk in chunks if chunk.drafts]
                for chunk in drafted:  # the guesses leave the sequence; _verify appends the tokens it keeps
                    chunk.request.seq.truncate(chunk.start + chunk.length - chunk.drafts, chunk.next_position)
            sampling, rows = [], []
            prefilled = row = 0
            for chunk in chunks:
                request, seq = chunk.request, chunk.request.seq
                computed = chunk.length - chunk.drafts
                seq.num_computed_tokens += computed  # its full blocks were registered when scheduled
                if not (computed == 1 and chunk.start >= request.prompt_len):  # else: a generated token fed back
                    request.count(tokens_prefilled=computed)
                    prefilled += computed
                if chunk.samples and not chunk.drafts:
                    sampling.append(request)
                    rows.append(row)
                row += (1 + chunk.drafts) if chunk.samples else 0
            finished = list(failed)
            if sampling:
                plain = logits if len(rows) == len(logits) else logits[rows]
                tokens = sample(plain, sampling, self.stop_token_ids, self._grammars)
                for request, token in zip(sampling, tokens):
                    if self._accept(request, token):
                        finished.append(request)
            row = 0
            for chunk in chunks:
                if chunk.drafts and self._verify(chunk, logits[row:row + 1 + chunk.drafts]):
                    finished.append(chunk.request)
                row += (1 + chunk.drafts) if chunk.samples else 0
            elapsed = time.perf_counter() - started
            phase = "prefill" if prefilled else "decode"
            self.phases[f"{phase}_steps"] += 1
            self.phases[f"{phase}_time_s"] += elapsed
            if not prefilled:
                self.phases["decode_tokens"] += len(chunks)
            self.counters.forward_steps += 1
            self.counters.step_time_s += elapsed
            for chunk in chunks:
                chunk.request.counters.forward_steps += 1
                chunk.request.counters.step_time_s += elapsed
                chunk.request.session.counters.forward_steps += 1
                chunk.request.session.counters.step_time_s += elapsed
            return finished

    def run_until_idle(self) -> list[Request]:
        """Step until no request is pending; return every request finished meanwhile."""
        finished: list[Request] = []
        while self.has_pending():
            finished.extend(self.step())
        return finished

    def speculation_blocker(self) -> str | None:
        """Why this engine's model cannot take draft tokens (None: it can). A hybrid model's linear-attention state,
        a sliding-window pool or layers that serve only the sampled rows cannot step back over a rejected draft."""
        shape = self.adapter.shape
        if self.runner.device.type != "cpu":
            return ("drafts are measured on the CPU only so far (on a GPU each kept draft is a host sync, and a "
                    "drafted step leaves the CUDA graphs)")
        if self.runner.recurrent is not None:
            return "its linear-attention layers' state cannot step back over a rejected draft"
        if self.runner.window_blocks:
            return "its sliding-window layers free blocks a rejected draft would need again"
        if shape.sampled_only_from is not None:
            return "its last layers compute the sampled rows alone"
        return None

    def _drafts(self, request: Request, room: int):
        """A greedy request's draft tokens for its next step (at most `room`), their positions and the next position;
        None when it samples or has nothing to guess (engine/core/speculation.py).

        Up to `speculative_tokens` guesses from its history, cut where its grammar (if any) would refuse one; when
        none is left, the tokens the grammar forces from here (xgrammar's jump-forward tokens: a tool call's
        `<tool_call>\\n{"name":` frame, a schema's keys; at most `FORCED_MOST`), unless the model turned down the
        first of them `FORCED_MISSES` times in a row in this reply (it splits such text its own way)."""
        if not request.sampling.greedy:
            return None
        tokens = propose(request.seq.token_ids, min(self.config.speculative_tokens, room))
        forced = 0
        if request.matcher is not None:
            tokens = _allowed_prefix(request.matcher, tokens)
            if not tokens and request.forced_misses < FORCED_MISSES:
                tokens = self._forced_tokens(request.matcher)[:min(room, FORCED_MOST)]
                forced = len(tokens)
        request.forced_drafts = forced
        if not tokens:
            return None
        positions, next_position = self.adapter.segment_positions(Segment(tokens), request.seq.next_position)
        request.count(draft_tokens=len(tokens), draft_tokens_forced=forced)
        return tokens, positions, next_position

    def _forced_tokens(self, matcher) -> list[int]:
        """The tokens `matcher`'s grammar forces from its state. xgrammar leaves out a last token that a longer one
        could extend (the ` "` before a tool's name); the tokenizer's own split of the whole forced text, where it
        agrees with xgrammar's tokens, adds it back, as a model writing the text's usual split would write it."""
        tokens = matcher.find_jump_forward_tokens()
        text = matcher.find_jump_forward_string()
        if not text or self.processor is None:
            return tokens
        try:
            usual = self.processor.tokenizer.encode(text, add_special_tokens=False)
        except RuntimeError:  # a fast tokenizer busy in a server thread ("Already borrowed"): xgrammar's tokens alone
            return tokens
        if len(usual) <= len(tokens) or usual[:len(tokens)] != tokens:
            return tokens
        return _allowed_prefix(matcher, usual)  # starts with `tokens`, which the grammar forces

    def _verify(self, chunk, logits: torch.Tensor) -> bool:
        """Keep a drafted chunk's tokens: the model's choice at its last real token, then at each draft that equals
        the choice before it; stop at the first draft that differs or when the turn ends. Returns True if it ended.

        Each row is sampled as a decode step would sample it (its grammar mask, the stop-token ban before
        min_new_tokens), after the tokens before it were accepted, so the kept tokens are the model's own choices.
        """
        request, seq = chunk.request, chunk.request.seq
        assert logits.shape[0] == chunk.drafts + 1, (logits.shape, chunk.drafts)
        try:
            for j in range(chunk.drafts + 1):
                token = sample(logits[j:j + 1], [request], self.stop_token_ids, self._grammars)[0]
                if j == 0 and request.forced_drafts:  # did the model write the first forced token as drafted?
                    request.forced_misses = 0 if token == chunk.guesses[0] else request.forced_misses + 1
                if self._accept(request, token):
                    return True
                if j == chunk.drafts or token != chunk.guesses[j]:
                    return False
                seq.num_computed_tokens += 1  # the draft's KV, computed in this step, is this token's
                request.count(draft_tokens_accepted=1)
            return False
        finally:  # blocks the kept drafts filled can be shared (a later turn's prefix match expects them keyed)
            self.block_manager.register_computed(seq)

    def _accept(self, request: Request, token: int) -> bool:
        """Append a sampled token to its session and decide whether the turn is over."""
        seq, params = request.seq, request.sampling
        positions, next_position = self.adapter.segment_positions(Segment([token]), seq.next_position)
        seq.append([token], positions, next_position)
        request.output_token_ids.append(token)
        request.count(tokens_generated=1)
        if request.first_token_at is None:
            request.first_token_at = time.perf_counter()
        reason = None
        if request.matcher is not None and not request.matcher.accept_token(token):
            reason = FinishReason.error
            request.error = f"token {token} was rejected by the structured-output grammar"
        elif request.matcher is not None and request.matcher.is_terminated():
            reason = FinishReason.stop
        elif token in params.stop_token_ids or (not params.ignore_eos and token in self.stop_token_ids):
            reason = FinishReason.stop
        elif request.stop_strings is not None and request.stop_strings.add([token]):
            reason = FinishReason.stop_string  # only this token's text (and a stop string's length before it) is read
        if reason is None and len(request.output_token_ids) >= params.max_new_tokens:
            reason = FinishReason.length
        if reason is None:
            return False
        if self.processor is not None:  # the whole reply decoded once, as the client will see it
            text = self.processor.decode(request.output_token_ids)
            if reason is FinishReason.stop_string:
                text = text[: min((i for i in (text.find(s) for s in params.stop) if i >= 0), default=len(text))]
            request.text = text
        self.scheduler.remove(request)
        request.session.request = None
        request.session.history_len = len(seq)
        request.finish(reason, request.error)
        return True

    def prepare_structure(self, sampling: SamplingParams) -> None:
        """Compile `sampling`'s grammar now, outside the step lock (a server does this before `submit`).

        Raises:
            DossierError: the schema, regex or grammar is invalid (the message quotes it).
        """
        if sampling.structure is None:
            return
        self._grammar_cache().matcher(*sampling.structure)  # compiled once and cached; the matcher is discarded

    def structure_future(self, sampling: SamplingParams):
        """A concurrent future of `sampling`'s compiled grammar (done when cached), for callers that must not block
        a thread while it compiles (the server awaits it on its event loop); None without a structure.

        Raises:
            GrammarBusy: too many grammars are compiling now.
        """
        if sampling.structure is None:
            return None
        return self._grammar_cache().compile(*sampling.structure)

    def _grammar_cache(self) -> GrammarCache:
        with self._grammars_lock:  # not the step lock: building the tokenizer info must not stall a step
            if self._grammars is None:
                if self.processor is None:
                    raise DossierError(f"structured output needs a tokenizer; model {self.adapter.name!r} has none")
                self._grammars = GrammarCache(
                    self.processor.tokenizer, self.adapter.shape.vocab_size, self.stop_token_ids,
                    compile_timeout_s=self.config.grammar_compile_timeout_s,
                    cache_bytes=int(self.config.grammar_cache_mib * 2**20),
                    new_per_s=self.config.grammar_new_per_s, new_burst=self.config.grammar_new_burst)
            return self._grammars

    # --- introspection -----------------------------------------------------------

    def pool_line(self) -> str:
        """The KV pool in tokens and GiB, where its size came from, and the longest conversation it holds."""
        from engine.core.kv_budget import pool_line

        runner = self.runner
        return pool_line(runner.num_blocks, self.config.block_size, runner.per_block, runner.max_context,
                         runner.sized_from, runner.window_blocks, runner.window_per_block, self.adapter.shape.window)

    def stats(self) -> dict:
        """Engine-wide counters and the state of the KV block pool."""
        with self._lock:
            bm = self.block_manager
            return {
                "counters": self.counters.as_dict(),
                "kv_blocks_total": bm.num_blocks,
                "kv_blocks_free": bm.num_free,
                "kv_blocks_cached_free": bm.num_cached_free,
                "kv_blocks_evicted": bm.blocks_evicted,
                "block_size": self.config.block_size,
                "preemptions": self.scheduler.preemptions,
                "open_sessions": len(self.scheduler.sequences),
                "attention_backend": self.runner.backend,
                "phases": {k: round(v, 4) if isinstance(v, float) else v for k, v in self.phases.items()},
                **({"cpu_threads": {"now": self.threads.threads, "cores": self.threads.cores,
                                    "adaptive": self.threads.fixed is None, "changes": self.threads.changes,
                                    "others_busy_cores": round(self.threads.others, 2)}}
                   if self.threads is not None else {}),
                **({"vision": self.runner.encoder.stats()} if self.runner.encoder is not None else {}),
                **({"linear_states": self.runner.recurrent.stats()} if self.runner.recurrent is not None else {}),
                **({"window_blocks": self._window_stats()} if bm.window is not None else {}),
            }

    def _window_stats(self) -> dict:
        """The sliding-window layers' pool: its blocks, and what each open session holds of it now."""
        window = self.block_manager.window
        return {"window": window.window, "total": window.num_blocks, "free": window.num_free,
                "cached_free": window.num_cached_free, "evicted": window.blocks_evicted,
                "held_by_session": {sid: window.held(seq) for sid, seq in self.scheduler.sequences.items()}}


def _allowed_prefix(matcher, tokens: list[int]) -> list[int]:
    """The longest start of `tokens` that `matcher`'s grammar accepts from its state (a fork is tried: a few us)."""
    if not tokens:
        return tokens
    trial = matcher.fork()
    for i, token in enumerate(tokens):
        if not trial.accept_token(token):
            return tokens[:i]
    return tokens
