"""The fixed-size per-sequence states of a hybrid model's linear-attention layers (Qwen3.5's Gated DeltaNet).

An attention layer's memory of a sequence is its KV blocks; a linear-attention layer's is one state per
sequence (a convolution window and a DeltaNet matrix per value head) that each computed token updates
in place of a growing cache. `RecurrentStates` keeps them by sequence, with the number of tokens each
covers; the runner builds a `StepStates` per step from the scheduled chunks (their rows in the packed
batch, their sequence, their first position) and hands it to the layers through the attention callable.

The rule that keeps them right: a chunk starting at position 0 starts from zeros, any other must find
the state of exactly its first `start` tokens: its own (the previous chunk of the same sequence, or the
previous turn of its session, which so prefills only its new tokens), or a checkpoint. Checkpoints
make prefix sharing work: every `CHECKPOINT_BLOCKS` blocks of a prefill, the linear layers save their
state keyed by the hash of the KV block that ends there (`Segment.checkpoints`); the block manager
matches a new sequence's cached prefix only up to the last block with a checkpoint (`resumable`), and
its first chunk resumes from that checkpoint (`Segment.resume_key`). So N episodes with one system
prompt compute it once, up to the checkpoint before where they part; a request arriving in the step
that computes the prefix waits one step for the checkpoint (engine/core/scheduler.py). Checkpoints are
kept least recently used first within `max_checkpoint_bytes`; a preempted sequence resumes from one or
recomputes from 0. Closing a session frees its state.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from tools.errors import DossierError

__all__ = ["RecurrentStates", "StepStates", "Segment", "CHECKPOINT_BLOCKS"]

CHECKPOINT_BLOCKS = 4  # a prefill saves its linear layers' state every 4 KV blocks (64 tokens at block_size 16)


@dataclass(frozen=True, slots=True)
class Segment:
    """One scheduled chunk as the linear layers see it."""

    row: int  # first row of the chunk in the step's packed batch
    length: int  # its tokens
    seq_id: int  # its sequence
    start: int  # its first token's index in the sequence
    resume_key: int | None = None  # key of the KV block ending at `start` (a shared prefix's checkpoint)
    checkpoints: tuple[tuple[int, int], ...] = ()  # (position, key of the block ending there) to save a state at


class RecurrentStates:
    """Per sequence and linear layer: (tokens covered, conv window, DeltaNet state)."""

    def __init__(self, linear_layers: int = 1, max_checkpoint_bytes: int = 512 * 2**20, slots: int = 2**31) -> None:
        self._by_seq: dict[int, dict[int, tuple[int, torch.Tensor, torch.Tensor]]] = {}
        self.slots = slots  # sequences that may hold a state at once (the scheduler preempts idle ones beyond)
        self.linear_layers = linear_layers  # a checkpoint is complete when every linear layer has saved
        self.max_checkpoint_bytes = max_checkpoint_bytes
        self.checkpoints: OrderedDict[int, dict[int, tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self.resumed = 0  # chunks that started from a checkpoint (a shared prefix not recomputed)
        self.checkpoint_bytes = 0  # what the checkpoints hold now

    def stats(self) -> dict:
        """What `Engine.stats()` reports under "linear_states"."""
        return {"sequences": len(self._by_seq), "state_bytes": self.nbytes(), "checkpoints": len(self.checkpoints),
                "checkpoint_bytes": self.checkpoint_bytes, "resumed_from_checkpoint": self.resumed}

    def resumable(self, key: int) -> bool:
        """A complete checkpoint ends at the block with this key (the block manager's match stops at the last)."""
        found = self.checkpoints.get(key)
        if found is None or len(found) < self.linear_layers:
            return False
        self.checkpoints.move_to_end(key)
        return True

    def trim(self) -> None:
        """Drop the least recently used checkpoints beyond `max_checkpoint_bytes`."""
        while self.checkpoint_bytes > self.max_checkpoint_bytes and self.checkpoints:
            _, layers = self.checkpoints.popitem(last=False)
            self.checkpoint_bytes -= sum(c.nbytes + s.nbytes for c, s in layers.values())

    def holds(self, seq_id: int) -> bool:
        """Whether the sequence has a state now."""
        return seq_id in self._by_seq

    def forget(self, seq_id: int) -> None:
        """Free a sequence's states (its session closed)."""
        self._by_seq.pop(seq_id, None)

    def __len__(self) -> int:
        return len(self._by_seq)

    def nbytes(self) -> int:
        """Bytes the states hold now."""
        return sum(conv.nbytes + state.nbytes for layers in self._by_seq.values() for _, conv, state in layers.values())

    def step(self, segments: list[Segment]) -> StepStates:
        return StepStates(self, segments)


class StepStates:
    """What one step's linear layers read and write: `segments`, `load` and `store`."""

    def __init__(self, store: RecurrentStates, segments: list[Segment]) -> None:
        self._states, self.segments = store, segments

    def load(self, layer: int, segment: Segment) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(conv window, DeltaNet state) the chunk continues from; (None, None) at position 0 (zeros)."""
        if segment.start == 0:
            return None, None
        found = self._states._by_seq.get(segment.seq_id, {}).get(layer)
        if found is not None and found[0] == segment.start:
            return found[1], found[2]
        checkpoint = self._states.checkpoints.get(segment.resume_key, {}).get(layer)
        if checkpoint is not None:  # tensors are never written in place: the sequence may start from these
            if layer == min(self._states.checkpoints[segment.resume_key]):  # once per chunk, at its first layer
                self._states.resumed += 1
            return checkpoint
        covered = None if found is None else found[0]
        raise DossierError(f"sequence {segment.seq_id}: layer {layer}'s linear-attention state covers {covered} "
                           f"tokens and no checkpoint ends at {segment.start}, where its chunk starts; a hybrid "
                           "model computes a sequence from 0 or from a checkpointed prefix")

    def store(self, layer: int, segment: Segment, conv: torch.Tensor, state: torch.Tensor) -> None:
        self._states._by_seq.setdefault(segment.seq_id, {})[layer] = (segment.start + segment.length, conv, state)

    def checkpoint(self, layer: int, key: int, conv: torch.Tensor, state: torch.Tensor) -> None:
        """Save the state after the prefix ending at the block with this key."""
        states = self._states
        layers = states.checkpoints.setdefault(key, {})
        old = layers.get(layer)
        if old is not None:
            states.checkpoint_bytes -= old[0].nbytes + old[1].nbytes
        layers[layer] = (conv, state)
        states.checkpoint_bytes += conv.nbytes + state.nbytes
        states.checkpoints.move_to_end(key)
