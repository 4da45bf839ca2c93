"""A sequence: the append-only token ids of one session and where their KV lives.

A session's whole conversation is one `Sequence` that only grows: appended segments
and generated tokens. `num_computed_tokens` is the prefix whose KV is in the paged
cache (through `block_table`, and `window_table` for sliding-window layers); the rest is computed by the next forward steps. The
per-token positions come from the model adapter when a segment is appended
(M-RoPE positions are 3-D and not simply the token index); they are kept in one growing
int32 array (tokens, dims), so a step slices them instead of walking Python lists.
"""

import numpy as np

from engine.core.block_table import BlockTable
from models.base import MultimodalItem

__all__ = ["Sequence"]


class Sequence:
    """Token ids, positions and KV block table of one session."""

    __slots__ = (
        "seq_id",
        "block_size",
        "token_ids",
        "_positions",
        "next_position",
        "mm_items",
        "num_computed_tokens",
        "block_table",
        "block_hashes",
        "window_table",
        "window_start",
        "window_registered",
        "last_used_step",
        "cache_salt",
    )

    def __init__(self, seq_id: int, block_size: int, cache_salt: str | None = None) -> None:
        self.seq_id = seq_id
        self.block_size = block_size
        # Mixed into the key of the first block, so sequences with different salts (different
        # clients of a server) never share a cached block, nor learn what another one cached.
        self.cache_salt = cache_salt
        self.token_ids: list[int] = []
        self._positions: np.ndarray | None = None  # (capacity, dims) int32; rows past len(self) unused
        self.next_position = 0  # position of the next appended token
        self.mm_items: list[tuple[int, MultimodalItem]] = []  # (absolute first token, item)
        self.num_computed_tokens = 0  # leading tokens whose KV is in the cache
        self.block_table = BlockTable()  # KV block ids, in token order (an int32 array a step copies)
        self.block_hashes: list[int] = []  # hash of each leading full, computed block
        # a model with sliding-window layers: their blocks (engine/core/window_blocks.py), one entry per block
        # like block_table, the null block where no later query looks; the first entry that may still be held;
        # how many entries were keyed for sharing
        self.window_table = BlockTable()
        self.window_start = self.window_registered = 0
        self.last_used_step = 0  # engine step that last computed tokens of this sequence (LRU)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def positions(self) -> np.ndarray:
        """(tokens, dims) int32 position of every token (a view: do not write to it)."""
        if self._positions is None:
            return np.zeros((0, 1), dtype=np.int32)
        return self._positions[: len(self.token_ids)]

    def append(self, token_ids: list[int], positions, next_position: int, mm_items=()) -> None:
        """Append tokens (and the multimodal items placed in them) after the last token.

        `positions`: one per token, ints (RoPE) or tuples (M-RoPE), or an int array (n,) / (n, dims).
        """
        assert len(positions) == len(token_ids)
        start = len(self.token_ids)
        for item in mm_items:
            assert 0 <= item.offset and item.offset + item.length <= len(token_ids), "item outside its segment"
            self.mm_items.append((start + item.offset, item))
        if len(token_ids):
            self._store_positions(start, np.asarray(positions, dtype=np.int32))
        self.token_ids.extend(token_ids)
        self.next_position = next_position

    def truncate(self, length: int, next_position: int) -> None:
        """Drop the tokens from `length` on (a step's rejected draft tokens, never computed ones or images)."""
        assert self.num_computed_tokens <= length <= len(self.token_ids)
        assert not any(start + item.length > length for start, item in self.mm_items), "would cut an image"
        del self.token_ids[length:]
        self.next_position = next_position

    def _store_positions(self, start: int, new: np.ndarray) -> None:
        new = new.reshape(len(new), -1)  # (n, dims)
        stop = start + len(new)
        if self._positions is None:
            self._positions = np.empty((max(64, stop), new.shape[1]), dtype=np.int32)
        assert new.shape[1] == self._positions.shape[1], "position dims changed within a sequence"
        if stop > len(self._positions):  # grow geometrically: appends stay amortised O(1) per token
            grown = np.empty((max(stop, 2 * len(self._positions)), new.shape[1]), dtype=np.int32)
            grown[:start] = self._positions[:start]
            self._positions = grown
        self._positions[start:stop] = new

    def block_tokens(self, index: int) -> tuple[int, ...]:
        """Token ids of block `index` (may be partial for the last block)."""
        return tuple(self.token_ids[index * self.block_size : (index + 1) * self.block_size])

    def block_extra_key(self, index: int) -> tuple[str, ...]:
        """Content hashes of the multimodal items overlapping block `index` (empty for text)."""
        if not self.mm_items:
            return ()
        lo, hi = index * self.block_size, (index + 1) * self.block_size
        return tuple(item.content_hash for start, item in self.mm_items if start < hi and start + item.length > lo)

    def block_hash(self, index: int, parent: int | None) -> int:
        """Key of full block `index`: its parent's hash (the first's: the cache salt), token ids and extra key.

        Every later key chains from the first, so the salt separates whole prefixes, as vLLM's
        `cache_salt` does; the default salt None keys blocks as an unsalted cache would.
        """
        head = self.cache_salt if index == 0 else parent
        return hash((head, self.block_tokens(index), self.block_extra_key(index)))
