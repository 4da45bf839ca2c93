"""MaxScore document-at-a-time top-k over a bm25s score matrix, written jit-ready.

One plain-Python function, `maxscore_topk_jit_ready`, that `kernels/bm25_numba.py` wraps with
`numba.njit(nogil=True, cache=True)` (bm25s's `*_jit_ready` pattern: the reference-sized inputs
of the tests can run it un-jitted too). Everything is inlined in one function because a jitted
function can only call jitted helpers.

Why it is fast: postings are doc-id ordered, so the query's lists are merged in doc order with
no O(num_docs) accumulator and no O(num_docs) heap scan (bm25s spends most of a 1M-page query
there). MaxScore (Turtle & Flood 1995, as in Lucene/PISA) sorts the query's terms by their
score upper bound; once the k-th best score θ exceeds the summed bounds of the weakest terms,
those terms become "non-essential": only documents in the essential lists are candidates, and
the non-essential lists are probed by galloping search, so most of their postings are skipped.
Rare (high-idf) terms carry the largest bounds, so the lists left to scan are the short ones.

Exactness: a candidate's score is the float32 running sum over query positions in query order,
exactly as bm25s computes it; the pruning bounds are float64 sums of per-term maxima widened
by the worst float32 rounding of an nq-term sum, so pruning never drops a document that would
have entered the top k. Documents are visited in ascending id, so a later document tying the
k-th score never displaces an earlier one: ties resolve to ascending doc id.
"""

import numpy as np

__all__ = ["maxscore_topk_jit_ready"]


def maxscore_topk_jit_ready(data, indices, indptr, bounds, flat_queries, query_ptr, lo, hi, k,
                            mask, has_mask, out_ids, out_scores, out_counts):
    """Top-k for queries lo..hi-1 of a flattened batch, written into out_* rows.

    Args:
        data, indices, indptr: the score matrix (float32, int32/64, int32/64).
        bounds: float32 (vocab,) per-token max contribution (>= 0; +inf disables pruning).
        flat_queries: int64 token ids of all queries back to back; query_ptr: int64 (nq+1,).
        lo, hi: the queries this call handles.
        k: results per query (>= 1).
        mask, has_mask: bool (num_docs,) eligibility filter, used when has_mask.
        out_ids, out_scores: (nq, k) int64 / float32 outputs; out_counts: (nq,) int64.
    """
    big = np.int64(1) << np.int64(62)
    for qi in range(lo, hi):
        query = flat_queries[query_ptr[qi]:query_ptr[qi + 1]]
        nq = len(query)
        out_counts[qi] = 0
        if nq == 0:
            continue
        # distinct tokens that have postings, with their multiplicity
        uniq = np.unique(query)
        keep = np.zeros(len(uniq), dtype=np.bool_)
        for j in range(len(uniq)):
            keep[j] = indptr[uniq[j] + 1] > indptr[uniq[j]]
        terms = uniq[keep]
        nt = len(terms)
        if nt == 0:
            continue
        mult = np.zeros(nt, dtype=np.float64)
        slot_of_pos_unsorted = np.full(nq, -1, dtype=np.int64)
        for i in range(nq):
            j = np.searchsorted(terms, query[i])
            if j < nt and terms[j] == query[i]:
                mult[j] += 1.0
                slot_of_pos_unsorted[i] = j
        # sort terms by their bound (ascending): the weakest become non-essential first
        key = np.empty(nt, dtype=np.float64)
        for j in range(nt):
            key[j] = mult[j] * np.float64(bounds[terms[j]])
        order = np.argsort(key)
        rank = np.empty(nt, dtype=np.int64)
        pos = np.empty(nt, dtype=np.int64)
        end = np.empty(nt, dtype=np.int64)
        mults = np.empty(nt, dtype=np.float64)
        prefix = np.empty(nt, dtype=np.float64)  # prefix[j] = sum of the j+1 smallest bounds
        acc = 0.0
        for s in range(nt):
            j = order[s]
            rank[j] = s
            pos[s] = indptr[terms[j]]
            end[s] = indptr[terms[j] + 1]
            mults[s] = mult[j]
            acc += key[j]
            prefix[s] = acc
        slot_of_pos = np.full(nq, -1, dtype=np.int64)
        for i in range(nq):
            if slot_of_pos_unsorted[i] >= 0:
                slot_of_pos[i] = rank[slot_of_pos_unsorted[i]]
        # worst-case relative float32 rounding of an nq-term running sum, with room to spare
        widen = 1.0 + (nq + 2) * 1.2e-7
        contrib = np.zeros(nt, dtype=np.float32)
        heap_scores = np.empty(k, dtype=np.float32)
        heap_ids = np.empty(k, dtype=np.int64)
        size = 0
        theta = -np.inf  # k-th best score once the heap is full
        essential = 0  # terms [0, essential) are non-essential

        while True:
            doc = big
            for s in range(essential, nt):
                if pos[s] < end[s] and indices[pos[s]] < doc:
                    doc = np.int64(indices[pos[s]])
            if doc == big:
                break
            partial = 0.0
            for s in range(nt):
                contrib[s] = np.float32(0.0)
            for s in range(essential, nt):
                if pos[s] < end[s] and indices[pos[s]] == doc:
                    contrib[s] = data[pos[s]]
                    partial += mults[s] * np.float64(data[pos[s]])
                    pos[s] += 1
            if has_mask and not mask[doc]:
                continue
            alive = True
            for s in range(essential - 1, -1, -1):
                if size == k and (partial + prefix[s]) * widen <= theta:
                    alive = False
                    break
                # galloping search for the first posting >= doc
                p = pos[s]
                e = end[s]
                if p < e and indices[p] < doc:
                    low = p
                    high = p + 1
                    step = 1
                    while high < e and indices[high] < doc:
                        low = high
                        step *= 2
                        high = low + step
                    if high > e:
                        high = e
                    left = low + 1
                    right = high
                    while left < right:
                        mid = (left + right) >> 1
                        if indices[mid] < doc:
                            left = mid + 1
                        else:
                            right = mid
                    p = left
                    pos[s] = p
                if p < e and indices[p] == doc:
                    contrib[s] = data[p]
                    partial += mults[s] * np.float64(data[p])
            if not alive:
                continue
            score = np.float32(0.0)
            for i in range(nq):  # query order, float32: bit-identical to bm25s
                if slot_of_pos[i] >= 0:
                    score = np.float32(score + contrib[slot_of_pos[i]])
            if size < k:
                # push, sift towards the root while worse than the parent (worse = lower score, or
                # equal score and higher id)
                c = size
                size += 1
                while c > 0:
                    parent = (c - 1) >> 1
                    if heap_scores[parent] > score or (heap_scores[parent] == score and heap_ids[parent] < doc):
                        heap_scores[c] = heap_scores[parent]
                        heap_ids[c] = heap_ids[parent]
                        c = parent
                    else:
                        break
                heap_scores[c] = score
                heap_ids[c] = doc
            elif score > theta:
                c = 0
                while True:
                    child = 2 * c + 1
                    if child >= size:
                        break
                    right_child = child + 1
                    if right_child < size and (heap_scores[right_child] < heap_scores[child] or (
                            heap_scores[right_child] == heap_scores[child] and heap_ids[right_child] > heap_ids[child])):
                        child = right_child
                    if heap_scores[child] < score or (heap_scores[child] == score and heap_ids[child] > doc):
                        heap_scores[c] = heap_scores[child]
                        heap_ids[c] = heap_ids[child]
                        c = child
                    else:
                        break
                heap_scores[c] = score
                heap_ids[c] = doc
            else:
                continue
            if size == k:
                theta = np.float64(heap_scores[0])
                while essential < nt and prefix[essential] * widen <= theta:
                    essential += 1

        # pop the worst into the last free slot: best ends up first
        out_counts[qi] = size
        for slot in range(size - 1, -1, -1):
            out_scores[qi, slot] = heap_scores[0]
            out_ids[qi, slot] = heap_ids[0]
            last_score = heap_scores[slot]
            last_id = heap_ids[slot]
            n = slot
            c = 0
            while True:
                child = 2 * c + 1
                if child >= n:
                    break
                right_child = child + 1
                if right_child < n and (heap_scores[right_child] < heap_scores[child] or (
                        heap_scores[right_child] == heap_scores[child] and heap_ids[right_child] > heap_ids[child])):
                    child = right_child
                if heap_scores[child] < last_score or (heap_scores[child] == last_score and heap_ids[child] > last_id):
                    heap_scores[c] = heap_scores[child]
                    heap_ids[c] = heap_ids[child]
                    c = child
                else:
                    break
            if n > 0:
                heap_scores[c] = last_score
                heap_ids[c] = last_id
