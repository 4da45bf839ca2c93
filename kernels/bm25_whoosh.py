"""Whoosh's BM25F as a score matrix for the kernels in `kernels.bm25`.

Whoosh (2.7, `whoosh.scoring.BM25F`, the MADQA harness's search) scores a term t in a
page d as

    idf(t)   = log(N / (df(t) + 1)) + 1                      N: all pages, deleted or not
    score    = idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * fl(d) / avgfl))

with K1 = 1.2, B = 0.75. Two details change rankings and are kept here:
- fl(d) is not the page's token count but its one-byte code decoded again:
  `whoosh.util.numeric.length_to_byte` is a bisect into a 256-entry table, so the decoded
  length is the smallest table value >= the true length (lengths from 106374 on are 106374).
  Pages of 11 and 12 tokens score alike; past ~100 tokens whole ranges share a length.
- avgfl uses the exact total token count (the segment keeps it as an integer) / N.
  (A Whoosh index whose segments were merged re-adds the decoded lengths instead; the
  harness builds one segment in one commit, and so do the parity tests.)

The result is float64 then rounded to float32, the kernels' storage type; Whoosh sums the
float64 values, so two pages whose scores differ by less than float32's resolution tie
here (ordered by page row, as Whoosh orders exact ties).
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from kernels.bm25 import ScoreMatrix

__all__ = ["WHOOSH_K1", "WHOOSH_B", "LENGTH_TABLE", "quantized_length", "whoosh_score_matrix"]

WHOOSH_K1 = 1.2  # whoosh.scoring.BM25F default term-frequency saturation
WHOOSH_B = 0.75  # whoosh.scoring.BM25F default length normalisation

# whoosh.util.numeric._length_byte_cache: the length each of the 256 byte codes stands for.
LENGTH_TABLE = np.array([
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 23, 25, 26, 28, 30, 32, 34, 36, 38,
    40, 42, 45, 47, 49, 52, 54, 57, 60, 63, 66, 69, 72, 75, 79, 82, 86, 89, 93, 97, 101, 106, 110, 114, 119,
    124, 129, 134, 139, 145, 150, 156, 162, 169, 175, 182, 189, 196, 203, 211, 219, 227, 235, 244, 253, 262,
    271, 281, 291, 302, 313, 324, 336, 348, 360, 373, 386, 399, 414, 428, 443, 459, 475, 491, 508, 526, 544,
    563, 583, 603, 623, 645, 667, 690, 714, 738, 763, 789, 816, 844, 873, 903, 933, 965, 998, 1032, 1066,
    1103, 1140, 1178, 1218, 1259, 1302, 1345, 1391, 1438, 1486, 1536, 1587, 1641, 1696, 1753, 1811, 1872,
    1935, 1999, 2066, 2135, 2207, 2280, 2356, 2435, 2516, 2600, 2687, 2777, 2869, 2965, 3063, 3165, 3271,
    3380, 3492, 3608, 3728, 3852, 3980, 4112, 4249, 4390, 4536, 4686, 4842, 5002, 5168, 5340, 5517, 5700,
    5889, 6084, 6286, 6494, 6709, 6932, 7161, 7398, 7643, 7897, 8158, 8428, 8707, 8995, 9293, 9601, 9918,
    10247, 10586, 10936, 11298, 11671, 12057, 12456, 12868, 13294, 13733, 14187, 14656, 15141, 15641, 16159,
    16693, 17244, 17814, 18403, 19011, 19640, 20289, 20959, 21652, 22367, 23106, 23869, 24658, 25472, 26314,
    27183, 28081, 29009, 29967, 30957, 31979, 33035, 34126, 35254, 36418, 37620, 38863, 40146, 41472, 42841,
    44256, 45717, 47227, 48786, 50397, 52061, 53780, 55556, 57390, 59285, 61242, 63264, 65352, 67510, 69739,
    72041, 74419, 76876, 79414, 82035, 84743, 87541, 90430, 93416, 96499, 99684, 102975, 106374,
], dtype=np.int64)
assert len(LENGTH_TABLE) == 256


def quantized_length(length: int) -> int:
    """The field length Whoosh scores with: its byte code (`length_to_byte`) decoded again."""
    if length >= LENGTH_TABLE[-1]:
        return int(LENGTH_TABLE[-1])
    return int(LENGTH_TABLE[bisect_left(LENGTH_TABLE.tolist(), length)])


def whoosh_score_matrix(doc_ptr: np.ndarray, docs: np.ndarray, tf: np.ndarray, lengths: np.ndarray,
                        k1: float = WHOOSH_K1, b: float = WHOOSH_B) -> ScoreMatrix:
    """BM25F contributions of every posting, laid out as the kernels' `ScoreMatrix`.

    Args:
        doc_ptr: int64 (vocab+1,): token t's postings are doc_ptr[t]:doc_ptr[t+1].
        docs: int32 (postings,): page row of each posting, ascending within a token.
        tf: (postings,): occurrences of the token in that page.
        lengths: (pages,): tokens of each page after analysis (stopwords and short tokens removed).
        k1, b: BM25 constants (Whoosh's defaults).

    Returns:
        The score matrix; `topk` over it ranks as Whoosh's BM25F does (ties by page row).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    num_docs = len(lengths)
    assert len(docs) == len(tf) and int(doc_ptr[-1]) == len(docs)
    # np.searchsorted(side="left") is bisect_left; codes past the table's end clamp to its last length
    codes = np.minimum(np.searchsorted(LENGTH_TABLE, lengths, side="left"), len(LENGTH_TABLE) - 1)
    decoded = LENGTH_TABLE[codes].astype(np.float64)  # (pages,)
    avgfl = (lengths.sum() / (num_docs or 1)) or 1.0
    df = np.diff(np.asarray(doc_ptr, dtype=np.int64))  # (vocab,)
    idf = np.log(num_docs / (df + 1.0)) + 1.0  # (vocab,)
    token_of = np.repeat(np.arange(len(df)), df)  # (postings,)
    tf = np.asarray(tf, dtype=np.float64)
    norm = k1 * ((1.0 - b) + b * decoded[np.asarray(docs, dtype=np.int64)] / avgfl)
    data = idf[token_of] * ((tf * (k1 + 1.0)) / (tf + norm))
    return ScoreMatrix(data=data.astype(np.float32), indices=np.asarray(docs, dtype=np.int32),
                       indptr=np.asarray(doc_ptr, dtype=np.int64), num_docs=num_docs)
