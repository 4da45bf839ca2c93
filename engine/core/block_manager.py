"""Paged KV-cache bookkeeping: a fixed pool of blocks, reference counts, prefix hashing.

Full blocks are keyed by (parent hash, token ids, extra key), the first block's parent being
the sequence's cache salt, so an identical prefix under one salt
(the system prompt and tool schema every episode shares) is computed once and its
blocks are shared by reference count. A block whose count falls to zero stays in the
hash table as a cached block, and free blocks are handed out least recently freed
first: unpinned cached blocks are evicted before anything else. Only full blocks are
ever shared and a sequence only writes after its last token, so no copy-on-write is needed.

Hybrid models (Qwen3.5) also need, for a shared prefix, the state of their linear-attention layers at
its end: `resumable` (set by the engine) says which block keys have a state checkpoint, and a match
stops at the last such block, recomputing from there (engine/core/recurrent_state.py).

Models with sliding-window layers (Gemma-3) keep those layers' KV in a second pool that holds only each
sequence's window (`window`, engine/core/window_blocks.py); this manager keeps a sequence's two tables in
step, and a match is taken only as far as the window pool still caches the blocks its next query sees.

Blocks are registered when a step is scheduled to fill them, not after the step ran:
a request admitted later in the same step finds them and shares them, so N sessions
that arrive together with one system prompt compute it once. This relies on the
attention writing every new K/V of a step into the cache before any query of that
step reads the cache (`engine/core/attention.py` does, layer by layer).
"""

from collections import OrderedDict
from collections.abc import Callable

from engine.core.block_table import BlockTable
from engine.core.sequence import Sequence

__all__ = ["BlockManager", "BlockPool"]


class BlockPool:
    """A fixed pool of blocks: reference counts, a free list (least recently freed first) and the prefix table.

    A free block with a key is a cached block: `take` hands out free blocks in order, evicting a cached one
    only when it comes up. `BlockManager` (every layer's KV, or a hybrid model's full-attention layers) and
    `WindowBlocks` (engine/core/window_blocks.py: the sliding-window layers) each keep one.
    """

    def __init__(self, num_blocks: int) -> None:
        assert num_blocks >= 1
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks  # key while registered in the table
        self.block_tokens: list[tuple[int, ...] | None] = [None] * num_blocks  # to verify a hash hit
        self.hash_to_block: dict[int, int] = {}
        # Free blocks, least recently freed first; a free block with a hash is a cached block.
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.blocks_evicted = 0  # cached blocks overwritten to make room

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_cached_free(self) -> int:
        """Free blocks that still hold a reusable prefix."""
        return sum(1 for b in self.free if self.block_hash[b] is not None)

    def take(self) -> int:
        """A free block for new KV, held once (a cached one is forgotten: its KV will be overwritten)."""
        block, _ = self.free.popitem(last=False)
        assert self.ref_counts[block] == 0
        key = self.block_hash[block]
        if key is not None:
            if self.hash_to_block.get(key) == block:
                del self.hash_to_block[key]
            self.block_hash[block] = None
            self.block_tokens[block] = None
            self.blocks_evicted += 1
        self.ref_counts[block] = 1
        return block

    def hold(self, block: int) -> None:
        """One more holder of a block (a cached block leaves the free list)."""
        if self.ref_counts[block] == 0:
            del self.free[block]
        self.ref_counts[block] += 1

    def drop(self, block: int) -> None:
        """One holder fewer; at none the block is free (and still cached if it has a key)."""
        self.ref_counts[block] -= 1
        assert self.ref_counts[block] >= 0, "block freed twice"
        if self.ref_counts[block] == 0:
            self.free[block] = None

    def lookup(self, key: int, tokens: tuple[int, ...]) -> int | None:
        """The cached block with this key and these tokens, or None."""
        block = self.hash_to_block.get(key)
        return None if block is None or self.block_tokens[block] != tokens else block

    def register(self, key: int, block: int, tokens: tuple[int, ...]) -> bool:
        """Key a computed block so others can share it; False when the key already has a block."""
        if key in self.hash_to_block:
            return False
        self.hash_to_block[key] = block
        self.block_hash[block] = key
        self.block_tokens[block] = tokens
        return True

    def check_invariants(self) -> None:
        """Internal consistency (tests and debugging)."""
        assert all(c >= 0 for c in self.ref_counts)
        assert set(self.free) == {b for b, c in enumerate(self.ref_counts) if c == 0}
        for key, block in self.hash_to_block.items():
            assert self.block_hash[block] == key


class BlockManager(BlockPool):
    """Allocates KV blocks to sequences and shares full blocks with equal keys.

    `window`: a model with sliding-window layers keeps their KV in a second pool that holds only each
    sequence's window (engine/core/window_blocks.py); this manager then covers the other layers, and every
    method here keeps both tables of a sequence in step.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True, window=None) -> None:
        assert block_size >= 1
        super().__init__(num_blocks)
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.window = window  # WindowBlocks or None
        # hybrid models: whether a block key ends a prefix whose linear-layer state is checkpointed; None: any
        self.resumable: Callable[[int], bool] | None = None
        self.checkpoint_blocks = 1  # hybrid models: a state checkpoint follows every this many blocks of a prefill
        self.registered_now: set[int] = set()  # keys registered since begin_step(): computed by the coming step

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def match_prefix(self, seq: Sequence) -> int:
        """Take the cached blocks that continue `seq`'s computed prefix; return tokens gained.

        Matching stops one token short of the end: the last token is always computed,
        because its logits are what the next step samples from.
        """
        if not self.enable_prefix_caching or seq.num_computed_tokens != len(seq.block_table) * self.block_size:
            return 0
        chain = self._chain(seq, len(seq) - 1)
        if self.resumable is not None:  # only up to a prefix whose linear-layer state is kept
            chain = chain[: max((i + 1 for i, (key, _) in enumerate(chain) if self.resumable(key)), default=0)]
        if self.window is not None:  # only up to a prefix whose window the sliding-window layers still have
            chain = chain[: self.window.matchable(seq, [key for key, _ in chain])]
            self.window.take_match(seq, [key for key, _ in chain])
        for key, block in chain:
            self.hold(block)
            seq.block_table.append(block)
            seq.block_hashes.append(key)
            seq.num_computed_tokens += self.block_size
        return len(chain) * self.block_size

    def _chain(self, seq: Sequence, limit: int) -> list[tuple[int, int]]:
        """(key, block) of the cached full blocks that continue `seq`'s block table, within its first `limit` tokens."""
        chain = []
        index = len(seq.block_table)
        while (index + 1) * self.block_size <= limit:
            parent = (chain[-1][0] if chain else seq.block_hashes[index - 1]) if index else None
            key = seq.block_hash(index, parent)
            block = self.lookup(key, seq.block_tokens(index))
            if block is None:
                break
            chain.append((key, block))
            index += 1
        return chain

    def begin_step(self) -> None:
        """A new step is being scheduled: blocks registered from now on are computed by it."""
        self.registered_now.clear()

    def waits_on_this_step(self, seq: Sequence) -> bool:
        """`seq` (no blocks yet) could share a prefix up to a checkpoint that this step's forward will save.

        A hybrid model's checkpoint at block i exists only after the step that computes block i; a sequence
        whose cached prefix reaches such a block gains that prefix by waiting one step.
        """
        if self.resumable is None or not self.enable_prefix_caching or seq.block_table:
            return False
        every = self.checkpoint_blocks
        return any((i + 1) % every == 0 and key in self.registered_now
                   for i, (key, _) in enumerate(self._chain(seq, len(seq) - 1)))

    def cached_prefix_tokens(self, seq: Sequence) -> int:
        """Leading tokens of `seq` (not yet admitted) whose full blocks are in the cache; nothing is taken.

        A router over several engines asks each this to send a conversation where its history is. (With
        sliding-window layers the count is of the other layers' blocks: an upper bound of what is reused.)
        """
        if not self.enable_prefix_caching:
            return 0
        parent, index = None, 0
        while (index + 1) * self.block_size <= len(seq):
            key = seq.block_hash(index, parent)
            if self.lookup(key, seq.block_tokens(index)) is None:
                break
            parent, index = key, index + 1
        return index * self.block_size

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """Blocks to add so that `seq` can hold `num_tokens` tokens of KV."""
        return max(0, self.blocks_for(num_tokens) - len(seq.block_table))

    def fits(self, seq: Sequence, num_tokens: int) -> bool:
        """Both pools have the free blocks `seq` needs to hold `num_tokens` tokens."""
        if self.blocks_needed(seq, num_tokens) > self.num_free:
            return False
        return self.window is None or self.window.needed(seq, num_tokens) <= self.window.num_free

    def capacity(self, seq: Sequence) -> int:
        """Tokens `seq` could hold with every free block of both pools."""
        tokens = (len(seq.block_table) + self.num_free) * self.block_size
        if self.window is not None:
            tokens = min(tokens, (len(seq.window_table) + self.window.num_free) * self.block_size)
        return tokens

    def slide(self, seq: Sequence) -> None:
        """Free the sliding-window blocks `seq`'s next tokens can no longer see (no-op without window layers)."""
        if self.window is not None:
            self.window.slide(seq)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        """Grow `seq`'s block table to hold `num_tokens` tokens, evicting cached blocks LRU first."""
        needed = self.blocks_needed(seq, num_tokens)
        assert needed <= self.num_free, "caller must check free blocks first"
        for _ in range(needed):
            seq.block_table.append(self.take())
        if self.window is not None:
            self.window.allocate(seq, num_tokens)

    def register_computed(self, seq: Sequence) -> None:
        """Hash the blocks that became full and computed, so other sequences can share them."""
        self.register_blocks(seq, seq.num_computed_tokens)

    def register_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Hash `seq`'s full blocks among its first `num_tokens` tokens, so other sequences can share them.

        The scheduler calls this for the tokens a step is about to compute: the blocks are
        written by that step's forward before any later admission can read them.
        """
        if not self.enable_prefix_caching:
            return
        full = min(num_tokens, len(seq)) // self.block_size
        for index in range(len(seq.block_hashes), full):
            parent = seq.block_hashes[index - 1] if index else None
            key = seq.block_hash(index, parent)
            seq.block_hashes.append(key)
            if self.register(key, seq.block_table[index], seq.block_tokens(index)):
                self.registered_now.add(key)
        if self.window is not None:
            self.window.register_blocks(seq, full)

    def release(self, seq: Sequence) -> None:
        """Drop `seq`'s blocks (session closed or preempted); its KV must be recomputed later.

        Blocks are freed tail first so that, under pressure, a chain is evicted from its
        end and its shared head survives longest.
        """
        for block in reversed(seq.block_table):
            self.drop(block)
        seq.block_table = BlockTable()
        seq.block_hashes = []
        seq.num_computed_tokens = 0
        if self.window is not None:
            self.window.release(seq)

    def check_invariants(self) -> None:
        """Internal consistency (tests and debugging)."""
        super().check_invariants()
        if self.window is not None:
            self.window.check_invariants()
