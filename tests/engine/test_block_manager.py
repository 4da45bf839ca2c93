"""Block manager: reference counts, prefix hashing, LRU eviction of cached blocks."""

from engine.core.block_manager import BlockManager
from engine.core.sequence import Sequence


def seq_with(tokens: list[int], seq_id: int = 0, block_size: int = 4) -> Sequence:
    seq = Sequence(seq_id, block_size)
    seq.append(tokens, list(range(len(tokens))), len(tokens))
    return seq


def compute(bm: BlockManager, seq: Sequence) -> None:
    """Pretend a forward step computed every token of `seq`."""
    bm.allocate(seq, len(seq))
    seq.num_computed_tokens = len(seq)
    bm.register_computed(seq)


def test_allocation_and_release_restore_the_pool():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = seq_with(list(range(10)))
    compute(bm, seq)
    assert len(seq.block_table) == 3 and bm.num_free == 5
    bm.release(seq)
    assert bm.num_free == 8 and seq.block_table == [] and seq.num_computed_tokens == 0
    bm.check_invariants()


def test_identical_prefix_is_shared_by_reference():
    bm = BlockManager(num_blocks=16, block_size=4)
    a = seq_with(list(range(13)), 0)
    compute(bm, a)
    b = seq_with(list(range(12)) + [99, 98], 1)
    assert bm.match_prefix(b) == 12
    assert b.block_table == a.block_table[:3]
    assert [bm.ref_counts[x] for x in a.block_table[:3]] == [2, 2, 2]
    bm.release(a)
    assert [bm.ref_counts[x] for x in b.block_table] == [1, 1, 1]
    bm.check_invariants()


def test_match_leaves_the_last_token_to_compute():
    bm = BlockManager(num_blocks=16, block_size=4)
    compute(bm, seq_with(list(range(8)), 0))
    again = seq_with(list(range(8)), 1)
    assert bm.match_prefix(again) == 4  # the second block holds the last token: recomputed for its logits


def test_different_parent_means_different_block():
    bm = BlockManager(num_blocks=16, block_size=4)
    compute(bm, seq_with([1, 2, 3, 4, 5, 6, 7, 8, 0], 0))
    other = seq_with([9, 9, 9, 9, 5, 6, 7, 8, 0], 1)  # same second block, different first
    assert bm.match_prefix(other) == 0


def test_released_blocks_stay_cached_until_evicted_lru_first():
    bm = BlockManager(num_blocks=4, block_size=4)
    old = seq_with(list(range(9)), 0)
    compute(bm, old)  # 3 blocks, two full and hashed
    bm.release(old)
    assert bm.num_cached_free == 2
    revived = seq_with(list(range(9)), 1)
    assert bm.match_prefix(revived) == 8  # served from freed-but-cached blocks
    bm.release(revived)
    # a new sequence needing all 4 blocks evicts the cached ones
    fresh = seq_with(list(range(100, 116)), 2)
    compute(bm, fresh)
    assert bm.blocks_evicted == 2 and bm.num_cached_free == 0
    assert bm.match_prefix(seq_with(list(range(9)), 3)) == 0
    bm.check_invariants()


def test_tail_blocks_are_evicted_before_the_shared_head():
    bm = BlockManager(num_blocks=6, block_size=4)
    seq = seq_with(list(range(13)), 0)  # blocks: head, middle, tail(full), partial
    compute(bm, seq)
    head = seq.block_table[0]
    bm.release(seq)
    filler = seq_with(list(range(200, 208)), 1)
    compute(bm, filler)  # takes the 2 never-used blocks
    filler2 = seq_with(list(range(300, 304)), 2)
    compute(bm, filler2)  # takes the least recently freed: the tail end of the chain
    assert bm.block_hash[head] is not None, "the chain's head should survive longest"


def test_extra_key_separates_equal_tokens():
    from models.base import MultimodalItem

    bm = BlockManager(num_blocks=16, block_size=4)
    a = Sequence(0, 4)
    a.append(list(range(9)), list(range(9)), 9, [MultimodalItem(2, 3, "img-a")])
    compute(bm, a)
    b = Sequence(1, 4)
    b.append(list(range(9)), list(range(9)), 9, [MultimodalItem(2, 3, "img-b")])
    assert bm.match_prefix(b) == 0
    assert a.block_extra_key(0) == ("img-a",) and a.block_extra_key(1) == ("img-a",) and a.block_extra_key(2) == ()
