"""Continuous batching: which tokens of which requests go into the next forward step.

Each step packs decode tokens (one per request that is generating) and chunks of
newly appended tokens (prefill) of many sessions into one batch, within a token
budget. KV blocks are allocated here. When the pool runs short the block manager
first reuses cached blocks nobody holds (least recently freed first); then the
scheduler preempts the least recently used idle session (a session waiting for its
tool keeps its blocks until then), and last the lowest-priority running request below its own. A
preempted sequence recomputes later, first taking back whatever of its prefix is
still cached.

With `EngineConfig.prefill_first` a step with any prompt to compute runs only prompts (a new reply's first
token sooner, replies in progress one step later); when no prompt fits, or the replies in progress have sat out a
whole token budget of prompt tokens, the step decodes as usual.

A model whose image tokens attend to each other both ways (Gemma-3) has every image computed in one
chunk: a chunk that would end inside an image ends before it, or, starting in it, runs to its end.

The full blocks a chunk will fill are registered in the prefix table as soon as the
chunk is scheduled, so a request admitted later in the same step shares them instead of
computing them again (the forward writes all of a step's K/V before reading the cache).
"""

from dataclasses import dataclass

from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig
from engine.core.request import FinishReason, Request
from engine.core.sequence import Sequence

__all__ = ["Chunk", "Scheduler"]


@dataclass(slots=True)
class Chunk:
    """Tokens [start, start + length) of a request's sequence, computed in this step."""

    request: Request
    start: int
    length: int
    samples: bool  # the chunk reaches the sequence end: sample the next token from its last position
    drafts: int = 0  # its last `drafts` tokens are guesses (engine/core/speculation.py): sample at each of them too
    guesses: tuple[int, ...] = ()  # the draft tokens themselves
    next_position: int = 0  # with drafts: the sequence's next position without them (restored when they are dropped)


class Scheduler:
    """Orders active requests and packs them into steps within the token budget."""

    def __init__(self, config: EngineConfig, block_manager: BlockManager) -> None:
        self.config = config
        self.blocks = block_manager
        self.active: list[Request] = []  # submission order = priority
        self.sequences: dict[int, Sequence] = {}  # every open session's sequence, for LRU preemption
        self.busy: set[int] = set()  # seq ids with an active request
        self.preemptions = 0
        self.states = None  # a hybrid model's RecurrentStates (set by the engine): at most `slots` sequences hold one
        self.whole_images = False  # a chunk never splits an image (set by the engine for bidirectional image models)
        # draft tokens for a request about to sample: (request, room in tokens) -> (token ids, their positions, next
        # position), or None; set by the engine when speculation is on and the model allows it
        # (engine/core/speculation.py)
        self.drafter = None
        self.decoders_waited = 0  # prompt tokens computed in prompts-only steps since decoding requests last ran

    def add(self, request: Request) -> None:
        self.active.append(request)
        self.busy.add(request.seq.seq_id)

    def remove(self, request: Request) -> None:
        self.active.remove(request)
        self.busy.discard(request.seq.seq_id)

    def has_work(self) -> bool:
        return bool(self.active)

    def schedule(self, step: int) -> tuple[list[Chunk], list[Request]]:
        """Pick this step's chunks. Returns (chunks, requests that can never run and were failed)."""
        budget = self.config.max_num_batched_tokens
        chunks: list[Chunk] = []
        failed: list[Request] = []
        scheduled: set[int] = set()
        self.blocks.begin_step()
        decoding = [r for r in self.active if r.is_decoding]
        prompts = [r for r in self.active if not r.is_decoding]
        # Decode tokens first: they are cheap and keep generating sessions moving. With `prefill_first` prompts go
        # first, and decoding requests join only a step in which no prompt could be scheduled, or once they have sat
        # out a whole token budget of prompts (a long prompt or a stream of prompts stalls a reply a step at most).
        prompts_only = (self.config.prefill_first and bool(prompts)
                        and self.decoders_waited < self.config.max_num_batched_tokens)
        order = prompts + decoding if prompts_only else decoding + prompts
        for request in order:
            if budget <= 0 or len(chunks) >= self.config.max_num_seqs:
                break
            if prompts_only and chunks and request.is_decoding:
                break  # a prompt runs in this step: replies in progress take the next one
            seq = request.seq
            if self.blocks.blocks_for(len(seq)) > self.blocks.num_blocks:
                failed.append(request)
                continue
            if not request.deferred and self.blocks.waits_on_this_step(seq):
                # a hybrid model: the prefix it would share is computed in this step, and the state checkpoint
                # that lets it resume there exists only after it; wait one step rather than compute it again
                request.deferred = True
                continue
            if not request.admitted or not seq.block_table:
                self._admit(request)
            self.blocks.slide(seq)  # sliding-window layers: free the blocks no query from here on sees
            length = self._whole_images(seq, min(seq.num_uncomputed_tokens, budget), extend=True)
            if not self._make_room(seq, seq.num_computed_tokens + length, scheduled):
                length = min(length, self.blocks.capacity(seq) - seq.num_computed_tokens)
                length = self._whole_images(seq, length, extend=False)
                if length <= 0:
                    continue  # wait for blocks held by requests already in this step
            if self.states is not None and not self._state_room(seq, scheduled):
                continue  # every state slot is held by a sequence in this step: wait
            self.blocks.allocate(seq, seq.num_computed_tokens + length)
            self.blocks.register_blocks(seq, seq.num_computed_tokens + length)
            chunks.append(Chunk(request, seq.num_computed_tokens, length, seq.num_computed_tokens + length == len(seq)))
            scheduled.add(seq.seq_id)
            seq.last_used_step = step
            budget -= length
        waited = prompts_only and bool(chunks) and bool(decoding)
        self.decoders_waited = self.decoders_waited + sum(chunk.length for chunk in chunks) if waited else 0
        if self.drafter is not None:  # after every real token: drafts take only the budget and blocks left over
            for chunk in chunks:
                if budget <= 0:
                    break
                if chunk.samples:  # a reply in progress, or a prompt whose last token starts one
                    self._add_drafts(chunk, budget)
                    budget -= chunk.drafts
        for request in failed:
            self.blocks.release(request.seq)
            self.remove(request)
            request.finish(
                FinishReason.error,
                f"session {request.session.session_id} needs {len(request.seq)} tokens of KV cache but the pool holds "
                f"{self.blocks.num_blocks * self.blocks.block_size}; raise EngineConfig.kv_cache_gib or num_kv_blocks",
            )
        return chunks, failed

    def _add_drafts(self, chunk: Chunk, budget: int) -> None:
        """Append a request's draft tokens to its sequence and its chunk, where they fit in the token budget and in
        blocks already free (drafts never preempt anything). Their blocks are not registered for sharing: the engine
        drops the drafts after the step, and the next steps register what was kept.

        A chunk that ends a prompt drafts too: the reply's first tokens (a tool call's forced frame) are computed in
        the prompt's own step. `schedule` adds drafts after every chunk of real tokens, so a prompt in the same step
        is never cut short or preempted for a guess. (Drafting only in steps that prefill nothing was tried and
        dropped: on one Zen 5 the serve benchmark's TTFT p50 stayed where it was, 0.29-0.30 s against 0.31-0.32 s
        with SmolLM2.)"""
        request, seq = chunk.request, chunk.request.seq
        room = min(budget, request.sampling.max_new_tokens - len(request.output_token_ids) - 1)
        if room <= 0:
            return
        drafted = self.drafter(request, room)
        if drafted is None:
            return
        tokens, positions, next_position = drafted
        if not tokens or not self.blocks.fits(seq, len(seq) + len(tokens)):
            return
        chunk.next_position = seq.next_position
        seq.append(tokens, positions, next_position)
        self.blocks.allocate(seq, len(seq))
        chunk.length += len(tokens)
        chunk.drafts, chunk.guesses = len(tokens), tuple(tokens)

    def _whole_images(self, seq: Sequence, length: int, extend: bool) -> int:
        """`length` tokens from `seq`'s computed prefix, moved so that the chunk never ends inside an image whose
        tokens attend to each other both ways (`whole_images`): back to the image's start, or, when the chunk starts
        in the image, on to its end (`extend`; past the token budget, as one image must be computed at once)."""
        if not self.whole_images or not seq.mm_items:
            return length
        start = seq.num_computed_tokens
        end = start + length
        for image_start, item in seq.mm_items:
            image_end = image_start + item.length
            if image_start < end < image_end:
                end = image_start if image_start > start else (image_end if extend else start)
        return end - start

    def _admit(self, request: Request) -> None:
        """Take cached prefix blocks; the first time, count what the cache served."""
        self.blocks.match_prefix(request.seq)
        if not request.admitted:
            request.admitted = True
            cached = request.seq.num_computed_tokens
            request.count(
                tokens_cached=cached,
                history_tokens=request.history_tokens,
                history_tokens_cached=min(cached, request.history_tokens),
            )

    def _make_room(self, seq: Sequence, num_tokens: int, scheduled: set[int]) -> bool:
        """Free blocks until `seq` can hold `num_tokens`: idle sessions first (LRU), then later requests."""
        while not self.blocks.fits(seq, num_tokens):
            victim = self._idle_victim() or self._running_victim(seq, scheduled)
            if victim is None:
                return False
            self._preempt(victim)
        return True

    def _idle_victim(self) -> Sequence | None:
        idle = [s for s in self.sequences.values() if s.seq_id not in self.busy and s.block_table]
        return min(idle, key=lambda s: s.last_used_step) if idle else None

    def _running_victim(self, seq: Sequence, scheduled: set[int]) -> Sequence | None:
        """The lowest-priority request below `seq`'s that holds blocks and is not in this step, or None.

        Never one submitted before `seq`: a later request that took an earlier one's blocks would be preempted by it
        in turn, and the two would recompute each other's prompts step after step.
        """
        for request in reversed(self.active):
            other = request.seq
            if other is seq:
                return None
            if other.seq_id not in scheduled and other.block_table:
                request.count(preemptions=1)
                return other
        return None

    def _state_room(self, seq: Sequence, scheduled: set[int]) -> bool:
        """A sequence about to get a linear-attention state finds a free slot, idle sessions' states freed LRU first
        (each such session is preempted: it resumes later from a checkpoint or from its first token)."""
        states = self.states
        if states.holds(seq.seq_id):
            return True
        new_here = sum(1 for other in scheduled if not states.holds(other))  # states this step will create
        while len(states) + new_here >= states.slots:
            idle = [s for s in self.sequences.values()
                    if s.seq_id not in self.busy and s.seq_id not in scheduled and states.holds(s.seq_id)]
            if not idle:
                return False
            self._preempt(min(idle, key=lambda s: s.last_used_step))
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.preemptions += 1
        self.blocks.release(seq)
        if self.states is not None:
            self.states.forget(seq.seq_id)  # its KV is gone: its state is of tokens it must compute again
