"""The KV blocks of sliding-window layers: a pool of their own that keeps only each sequence's window.

A sliding-window layer (Gemma-3's local layers: five of every six) lets a query at position p see keys
p - window + 1 .. p. Kept in the same blocks as the global layers, a 32k-token session would hold 32k
tokens of KV in every local layer, of which it reads the last `window`. Here those layers have their own
cache and pool (as vLLM's v1 engine gives each kind of layer its own cache spec): a sequence's
`window_table` has one entry per block of its tokens, like its `block_table`, but before a step computes
more of it, the blocks its next query can no longer see are freed (`slide`) and their entries point at
the null block (the cache's scratch block, which no unmasked key ever reads). A long session so holds at
most window / block_size + 1 blocks here, plus those of the chunk being computed.

Prefix sharing works across both pools: the window pool keys its blocks with the same keys as the other
layers' (the block manager computes them), and a match of M tokens is taken only where this pool still
caches the blocks a query at M sees (`matchable`); the match is shortened until it does. Freed blocks stay
cached (least recently freed first) until taken, so N episodes with one system prompt share its last
window's blocks as they share the rest.
"""

from __future__ import annotations

from engine.core.block_manager import BlockPool
from engine.core.block_table import BlockTable
from engine.core.sequence import Sequence

__all__ = ["WindowBlocks"]


class WindowBlocks(BlockPool):
    """The sliding-window layers' pool; `BlockManager` calls it for every change to a sequence's blocks.

    Args:
        num_blocks: blocks in the pool; the cache has one more, the null block (`null`).
        block_size: tokens per block (the same as the other layers').
        window: the layers' sliding window, tokens.
    """

    def __init__(self, num_blocks: int, block_size: int, window: int) -> None:
        assert window >= 1
        super().__init__(num_blocks)
        self.block_size, self.window = block_size, window
        self.null = num_blocks  # the cache's scratch block: entries out of every future query's window

    def first_visible(self, position: int) -> int:
        """Index of the first block a query at `position`, or any later one, can see."""
        return max(0, position - self.window + 1) // self.block_size

    def held(self, seq: Sequence) -> int:
        """Blocks `seq` holds in this pool now."""
        return int((seq.window_table.array != self.null).sum())

    def needed(self, seq: Sequence, num_tokens: int) -> int:
        """Blocks to add so that `seq` can compute up to `num_tokens` tokens."""
        return max(0, -(-num_tokens // self.block_size) - len(seq.window_table))

    def slide(self, seq: Sequence) -> None:
        """Free the blocks that no query from `seq.num_computed_tokens` on can see (they stay cached)."""
        first = min(self.first_visible(seq.num_computed_tokens), len(seq.window_table))
        table = seq.window_table
        for index in range(seq.window_start, first):
            if table[index] != self.null:
                self.drop(table[index])
                table[index] = self.null
        seq.window_start = max(seq.window_start, first)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        first = self.first_visible(seq.num_computed_tokens)
        for index in range(len(seq.window_table), -(-num_tokens // self.block_size)):
            seq.window_table.append(self.take() if index >= first else self.null)

    def matchable(self, seq: Sequence, keys: list[int]) -> int:
        """How many of the cached blocks `keys` (continuing `seq`'s table) can be taken: the most for which this
        pool also caches every block the first query after them sees."""
        start = len(seq.window_table)
        for count in range(len(keys), 0, -1):
            first = max(self.first_visible((start + count) * self.block_size), start)
            if all(self.lookup(keys[index - start], seq.block_tokens(index)) is not None
                   for index in range(first, start + count)):
                return count
        return 0

    def take_match(self, seq: Sequence, keys: list[int]) -> None:
        """Take the matched blocks (`matchable` said they are cached) this pool needs, null for the rest."""
        start = len(seq.window_table)
        first = self.first_visible((start + len(keys)) * self.block_size)
        for index, key in enumerate(keys, start):
            if index < first:
                seq.window_table.append(self.null)
                continue
            block = self.lookup(key, seq.block_tokens(index))
            assert block is not None, "take_match after matchable"
            self.hold(block)
            seq.window_table.append(block)
        seq.window_registered = len(seq.window_table)

    def register_blocks(self, seq: Sequence, full: int) -> None:
        """Key `seq`'s full blocks below index `full` (their keys are in `seq.block_hashes` already)."""
        table = seq.window_table
        for index in range(seq.window_registered, min(full, len(seq.block_hashes))):
            if table[index] != self.null:
                self.register(seq.block_hashes[index], table[index], seq.block_tokens(index))
        seq.window_registered = max(seq.window_registered, min(full, len(seq.block_hashes)))

    def release(self, seq: Sequence) -> None:
        for block in reversed(seq.window_table):
            if block != self.null:
                self.drop(block)
        seq.window_table = BlockTable()
        seq.window_start = seq.window_registered = 0
