"""The fixed-size per-sequence states of a hybrid model's linear-attention layers (Qwen3.5's Gated DeltaNet).

An attention layer's memory of a sequence is its KV blocks; a linear-attention layer's is one state per
sequence (a convolution window and a DeltaNet matrix per value head) that each computed token updates
in place of a growing cache. `RecurrentStates` keeps them by sequence, with the number of tokens each
covers; the runner builds a `StepStates` per step from the scheduled chunks (their rows in the packed
batch, their sequence, their first position) and hands it to the layers through the attention callable.

The rule that keeps them right: a chunk starting at position 0 starts from zeros, any other must find
the state of exactly its first `start` tokens (the previous chunk of the same sequence). That holds
when every sequence computes its tokens in order from 0, so the engine turns the prefix cache off for
these models (a prefix read from shared KV blocks has no state to go with it) and a preempted
sequence, whose KV is dropped, recomputes from position 0. A session keeps its state between turns,
so its next turn prefills only the new tokens; closing it frees the state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tools.errors import DossierError

__all__ = ["RecurrentStates", "StepStates", "Segment"]


@dataclass(frozen=True, slots=True)
class Segment:
    """One scheduled chunk as the linear layers see it."""

    row: int  # first row of the chunk in the step's packed batch
    length: int  # its tokens
    seq_id: int  # its sequence
    start: int  # its first token's index in the sequence


class RecurrentStates:
    """Per sequence and linear layer: (tokens covered, conv window, DeltaNet state)."""

    def __init__(self) -> None:
        self._by_seq: dict[int, dict[int, tuple[int, torch.Tensor, torch.Tensor]]] = {}

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
        if found is None or found[0] != segment.start:
            covered = None if found is None else found[0]
            raise DossierError(f"sequence {segment.seq_id}: layer {layer}'s linear-attention state covers {covered} "
                               f"tokens but its chunk starts at {segment.start}; a hybrid model must compute a "
                               "sequence in order from its first token (prefix caching off)")
        return found[1], found[2]

    def store(self, layer: int, segment: Segment, conv: torch.Tensor, state: torch.Tensor) -> None:
        self._states._by_seq.setdefault(segment.seq_id, {})[layer] = (segment.start + segment.length, conv, state)
