"""Blocked term-at-a-time BM25 top-k with MaxScore pruning, written jit-ready.

`blocked_topk_jit_ready` is compiled by `kernels/bm25_numba.py` with `numba.njit(nogil=True,
cache=True)` (bm25s's `*_jit_ready` pattern); its helpers are `register_jitable`, so the very same
source also runs as plain Python, which the tests do on small inputs.

Why it is fast. bm25s scatters every posting into a fresh num_docs-long accumulator and then
heap-scans all num_docs entries, so its cost grows with the corpus. Here:
- Blocks: the doc-id space is cut into blocks of 2^block_shift docs; the accumulator covers one
  block (64 KiB at 2^14, cache resident). Postings are doc-ordered, so each query token keeps a
  cursor and hands over exactly the postings of the current block. Only docs touched in the
  block are offered to the k-heap. No num_docs-sized array is read or written, so time per
  query stays flat as the corpus grows with postings per query fixed.
- MaxScore (Turtle & Flood 1995; Lucene, PISA): the query's distinct tokens are sorted by their
  score upper bound. Once the k-th best score θ exceeds the summed bounds of the weakest
  tokens, those tokens are "non-essential": a doc that only they match cannot enter the top k.
  Non-essential tokens are not scattered; blocks only they reach are jumped over; they are probed
  by galloping search only for docs an essential token touched and whose bound can still beat θ.
  High-idf (rare) tokens carry the largest bounds, so what is left to scan is the short lists.

Exactness. Essential tokens are scattered in query order, one pass per query position (a
repeated token counts twice), so a doc's accumulated score is bm25s's float32 running sum
whenever no non-essential token matches it; when one does, the doc's score is recomputed
position by position in query order. Pruning compares float64 bounds widened by the worst
float32 rounding of an nq-term sum, strictly, so no doc that would tie or beat θ is dropped. The
heap orders by (score desc, doc id asc) explicitly, so the visiting order does not matter.
"""

import numpy as np

try:
    from numba.extending import register_jitable
except ImportError:  # pragma: no cover - the plain-Python path needs no numba
    def register_jitable(fn):
        return fn

__all__ = ["blocked_topk_jit_ready"]


@register_jitable
def _gallop(indices, lo, hi, target):
    """First p in [lo, hi) with indices[p] >= target (hi if none); indices ascending."""
    if lo >= hi or indices[lo] >= target:
        return lo
    low = lo  # indices[low] < target
    step = 1
    high = lo + 1
    while high < hi and indices[high] < target:
        low = high
        step *= 2
        high = low + step
    if high > hi:
        high = hi
    left = low + 1
    right = high
    while left < right:
        mid = (left + right) >> 1
        if indices[mid] < target:
            left = mid + 1
        else:
            right = mid
    return left


@register_jitable
def _worse(score_a, id_a, score_b, id_b):
    """True if (score_a, id_a) ranks below (score_b, id_b): lower score, or equal score and higher id."""
    return score_a < score_b or (score_a == score_b and id_a > id_b)


@register_jitable
def _sift_down(heap_scores, heap_ids, size, score, doc):
    """Place (score, doc) at the root of a min-heap of `size` entries (root = worst) and sift down."""
    c = 0
    while True:
        child = 2 * c + 1
        if child >= size:
            break
        rc = child + 1
        if rc < size and _worse(heap_scores[rc], heap_ids[rc], heap_scores[child], heap_ids[child]):
            child = rc
        if _worse(heap_scores[child], heap_ids[child], score, doc):
            heap_scores[c] = heap_scores[child]
            heap_ids[c] = heap_ids[child]
            c = child
        else:
            break
    heap_scores[c] = score
    heap_ids[c] = doc


@register_jitable
def _offer(heap_scores, heap_ids, size, k, score, doc):
    """Offer (score, doc) to the k-heap; returns the new size."""
    if size < k:
        c = size
        while c > 0:
            parent = (c - 1) >> 1
            if _worse(score, doc, heap_scores[parent], heap_ids[parent]):
                heap_scores[c] = heap_scores[parent]
                heap_ids[c] = heap_ids[parent]
                c = parent
            else:
                break
        heap_scores[c] = score
        heap_ids[c] = doc
        return size + 1
    if _worse(heap_scores[0], heap_ids[0], score, doc):
        _sift_down(heap_scores, heap_ids, size, score, doc)
    return size


@register_jitable
def _drain(heap_scores, heap_ids, size, out_ids, out_scores):
    """Empty the heap into out_*[:size], best first."""
    for slot in range(size - 1, -1, -1):
        out_scores[slot] = heap_scores[0]
        out_ids[slot] = heap_ids[0]
        if slot > 0:
            _sift_down(heap_scores, heap_ids, slot, heap_scores[slot], heap_ids[slot])


def blocked_topk_jit_ready(data, indices, indptr, bounds, flat_queries, query_ptr, lo, hi, k, mask, has_mask,
                           block_shift, out_ids, out_scores, out_counts):
    """Top-k for queries lo..hi-1 of a flattened batch, written into out_* rows.

    Args:
        data, indices, indptr: the score matrix (float32, int32/64, int32/64).
        bounds: float32 (vocab,) per-token max contribution (>= 0; +inf disables pruning).
        flat_queries: int64 token ids of all queries back to back; query_ptr: int64 (nq+1,).
        lo, hi: the queries this call handles.
        k: results per query (>= 1).
        mask, has_mask: bool (num_docs,) eligibility filter, used when has_mask.
        block_shift: log2 of the block size in docs.
        out_ids, out_scores: (nq, k) int64 / float32 outputs; out_counts: (nq,) int64.
    """
    block = np.int64(1) << block_shift
    acc = np.zeros(block, dtype=np.float32)  # (block,) partial scores of the current block
    seen = np.zeros(block, dtype=np.bool_)  # (block,) touched in the current block
    touched = np.empty(block, dtype=np.int32)  # offsets touched, in first-touch order (int32: 64 KiB stays
    # under malloc's mmap threshold, so a call reuses warm heap memory instead of faulting in fresh pages)
    heap_scores = np.empty(k, dtype=np.float32)
    heap_ids = np.empty(k, dtype=np.int64)
    big = np.int64(1) << np.int64(62)
    for qi in range(lo, hi):
        out_counts[qi] = 0
        query = flat_queries[query_ptr[qi]:query_ptr[qi + 1]]
        nq = len(query)
        if nq == 0:
            continue
        # distinct tokens with postings, sorted by bound ascending ("slots")
        uniq = np.unique(query)
        n_slots = 0
        for t in uniq:
            if indptr[t + 1] > indptr[t]:
                n_slots += 1
        if n_slots == 0:
            continue
        terms = np.empty(n_slots, dtype=np.int64)
        key = np.zeros(n_slots, dtype=np.float64)
        j = 0
        for t in uniq:
            if indptr[t + 1] > indptr[t]:
                terms[j] = t
                j += 1
        for i in range(nq):
            j = np.searchsorted(terms, query[i])
            if j < n_slots and terms[j] == query[i]:
                key[j] += np.float64(bounds[query[i]])  # a repeated token's bound counts again
        order = np.argsort(key)
        slot_of_term = np.empty(n_slots, dtype=np.int64)
        cursor = np.empty(n_slots, dtype=np.int64)
        stop = np.empty(n_slots, dtype=np.int64)
        prefix = np.empty(n_slots, dtype=np.float64)  # prefix[s]: summed bounds of slots 0..s
        total = 0.0
        for s in range(n_slots):
            slot_of_term[order[s]] = s
            cursor[s] = indptr[terms[order[s]]]
            stop[s] = indptr[terms[order[s]] + 1]
            total += key[order[s]]
            prefix[s] = total
        slot_of_pos = np.full(nq, -1, dtype=np.int64)
        for i in range(nq):
            j = np.searchsorted(terms, query[i])
            if j < n_slots and terms[j] == query[i]:
                slot_of_pos[i] = slot_of_term[j]
        mult = np.zeros(n_slots, dtype=np.float64)
        for i in range(nq):
            if slot_of_pos[i] >= 0:
                mult[slot_of_pos[i]] += 1.0
        block_lo = np.empty(n_slots, dtype=np.int64)  # the current block's postings per slot
        block_hi = np.empty(n_slots, dtype=np.int64)
        widen = 1.0 + (nq + 2) * 1.2e-7  # worst relative float32 rounding of an nq-term sum, and some
        size = 0
        while True:
            theta = np.float64(heap_scores[0]) if size == k else -np.inf
            n_weak = 0  # slots [0, n_weak) are non-essential
            while n_weak < n_slots and prefix[n_weak] * widen < theta:
                n_weak += 1
            if n_weak == n_slots:
                break
            first = big  # the next block an essential token reaches
            for s in range(n_weak, n_slots):
                if cursor[s] < stop[s] and indices[cursor[s]] < first:
                    first = np.int64(indices[cursor[s]])
            if first == big:
                break
            base = (first >> block_shift) << block_shift
            limit = base + block
            for s in range(n_slots):
                if s < n_weak:  # lagging cursor of a skipped list: gallop
                    block_lo[s] = _gallop(indices, cursor[s], stop[s], base)
                    block_hi[s] = _gallop(indices, block_lo[s], stop[s], limit)
                else:  # essential: its postings are all read anyway
                    block_lo[s] = cursor[s]
                    p = cursor[s]
                    while p < stop[s] and indices[p] < limit:
                        p += 1
                    block_hi[s] = p
                cursor[s] = block_hi[s]
            # Probe the weak lists per candidate, or just scatter them too? Scattering costs about
            # a few binary-search steps per posting, a probe log2(range) steps per candidate.
            scan_all = False
            if n_weak > 0:
                essential_postings = 0
                weak_postings = 0
                probe_steps = 0
                for s in range(n_slots):
                    width = block_hi[s] - block_lo[s]
                    if s < n_weak:
                        weak_postings += width
                        steps = 1
                        while (np.int64(1) << steps) <= width:
                            steps += 1
                        probe_steps += steps
                    else:
                        essential_postings += width
                scan_all = essential_postings * probe_steps > 4 * weak_postings
            n_touched = 0
            for i in range(nq):  # essential positions (all when scan_all), query order
                s = slot_of_pos[i]
                if s < n_weak and not scan_all:
                    continue
                for p in range(block_lo[s], block_hi[s]):
                    off = indices[p] - base
                    acc[off] += data[p]
                    if not seen[off]:
                        seen[off] = True
                        touched[n_touched] = off
                        n_touched += 1
            n_probe = 0 if scan_all else n_weak  # weak slots still to probe per candidate
            weak_bound = prefix[n_probe - 1] if n_probe > 0 else 0.0
            for j in range(n_touched):
                off = touched[j]
                score = acc[off]
                acc[off] = np.float32(0.0)
                seen[off] = False
                doc = base + off
                if has_mask and not mask[doc]:
                    continue
                if n_probe > 0:
                    if size == k and (np.float64(score) + weak_bound) * widen < np.float64(heap_scores[0]):
                        continue
                    partial = np.float64(score)
                    matched_weak = False
                    alive = True
                    for s in range(n_probe - 1, -1, -1):  # strongest weak slot first
                        if size == k and (partial + prefix[s]) * widen < np.float64(heap_scores[0]):
                            alive = False
                            break
                        # binary search, inline: a call per probe would cost more than the search
                        left = block_lo[s]
                        right = block_hi[s]
                        while left < right:
                            mid = (left + right) >> 1
                            if indices[mid] < doc:
                                left = mid + 1
                            else:
                                right = mid
                        if left < block_hi[s] and indices[left] == doc:
                            partial += mult[s] * np.float64(data[left])
                            matched_weak = True
                    if not alive:
                        continue
                    if matched_weak:  # recompute in query order for bm25s's exact float32 sum
                        score = np.float32(0.0)
                        for i in range(nq):
                            s = slot_of_pos[i]
                            if s < 0:
                                continue
                            p = _gallop(indices, block_lo[s], block_hi[s], doc)
                            if p < block_hi[s] and indices[p] == doc:
                                score = np.float32(score + data[p])
                # inline test first: calls pass arrays, whose reference counting costs more than the test
                if size < k or _worse(heap_scores[0], heap_ids[0], score, doc):
                    size = _offer(heap_scores, heap_ids, size, k, score, doc)
        out_counts[qi] = size
        _drain(heap_scores, heap_ids, size, out_ids[qi], out_scores[qi])
