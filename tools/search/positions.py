"""Positional inverted index: for every token, the pages holding it and its positions there.

Stored as three flat arrays (a CSR of CSRs), memory-mapped on load:
    doc_ptr   int64 (vocab+1,)  token t's postings are entries doc_ptr[t]:doc_ptr[t+1]
    docs      int32 (postings,) page row of each posting, ascending within a token
    pos_ptr   int64 (postings+1,) posting e's positions are positions[pos_ptr[e]:pos_ptr[e+1]]
    positions int32 (tokens,)   token positions within the page, ascending

Phrase matching intersects the phrase words' pages, then checks positions with a
vectorised chain test, so cost follows the postings of the query, not the corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["PositionalIndex"]

_FILES = ("doc_ptr", "docs", "pos_ptr", "positions")


@dataclass(slots=True, frozen=True)
class PositionalIndex:
    doc_ptr: np.ndarray  # int64 (vocab+1,)
    docs: np.ndarray  # int32 (postings,)
    pos_ptr: np.ndarray  # int64 (postings+1,)
    positions: np.ndarray  # int32 (total tokens,)

    @classmethod
    def build(cls, page_token_ids: list[np.ndarray], vocab_size: int) -> PositionalIndex:
        """Build from each page's token-id sequence (page row = list index)."""
        lengths = np.array([len(ids) for ids in page_token_ids], dtype=np.int64)
        if lengths.sum() == 0:
            empty64 = np.zeros(1, np.int64)
            return cls(np.zeros(vocab_size + 1, np.int64), np.zeros(0, np.int32), empty64, np.zeros(0, np.int32))
        tokens = np.concatenate([np.asarray(ids, np.int64) for ids in page_token_ids])
        rows = np.repeat(np.arange(len(page_token_ids), dtype=np.int64), lengths)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        pos = np.arange(len(tokens), dtype=np.int64) - np.repeat(starts, lengths)
        order = np.lexsort((pos, rows, tokens))  # by token, then page, then position
        tokens, rows, pos = tokens[order], rows[order], pos[order]
        # one posting per distinct (token, page)
        new_posting = np.ones(len(tokens), dtype=bool)
        new_posting[1:] = (tokens[1:] != tokens[:-1]) | (rows[1:] != rows[:-1])
        posting_start = np.flatnonzero(new_posting)
        pos_ptr = np.append(posting_start, len(tokens)).astype(np.int64)
        posting_token = tokens[posting_start]
        doc_ptr = np.searchsorted(posting_token, np.arange(vocab_size + 1), side="left").astype(np.int64)
        return cls(doc_ptr, rows[posting_start].astype(np.int32), pos_ptr, pos.astype(np.int32))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name in _FILES:
            np.save(folder / f"{name}.npy", getattr(self, name))

    @classmethod
    def load(cls, folder: Path, mmap: bool = True) -> PositionalIndex:
        mode = "r" if mmap else None
        return cls(*(np.load(folder / f"{name}.npy", mmap_mode=mode) for name in _FILES))

    def pages(self, token: int) -> np.ndarray:
        """Sorted page rows containing the token (int32)."""
        return np.asarray(self.docs[self.doc_ptr[token]:self.doc_ptr[token + 1]])

    def pages_any(self, tokens: list[int]) -> np.ndarray:
        """Sorted page rows containing any of the tokens."""
        if not tokens:
            return np.zeros(0, np.int32)
        if len(tokens) == 1:
            return self.pages(tokens[0])  # already sorted and unique
        return np.unique(np.concatenate([self.pages(t) for t in tokens]))

    def _positions_in(self, token: int, pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(page rows, positions) of `token` restricted to the sorted `pages`, flattened."""
        lo, hi = int(self.doc_ptr[token]), int(self.doc_ptr[token + 1])
        docs = np.asarray(self.docs[lo:hi])
        hit = np.flatnonzero(np.isin(docs, pages, assume_unique=True)) + lo
        if len(hit) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        starts, ends = self.pos_ptr[hit], self.pos_ptr[hit + 1]
        counts = ends - starts
        index = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(counts.sum())
        return np.repeat(np.asarray(self.docs[hit], np.int64), counts), np.asarray(self.positions[index], np.int64)

    def phrase_pages(self, elements: list[list[int]], slop: int, pages: np.ndarray) -> np.ndarray:
        """Pages (among the sorted `pages`) where the elements occur in order.

        Args:
            elements: for each phrase word, the token ids it may be (several for a wildcard).
            slop: at most this many other tokens between consecutive words.
            pages: sorted candidate page rows (pages holding every element).
        """
        if len(pages) == 0:
            return pages
        # Keys combine page and position so one sorted array covers all candidate pages.
        span = np.int64(1 << 32)
        reach: np.ndarray | None = None
        for element in elements:
            rows, pos = zip(*(self._positions_in(t, pages) for t in element)) if element else ((), ())
            keys = np.unique(np.concatenate([r * span + p for r, p in zip(rows, pos)])) if rows else np.zeros(0, np.int64)
            if reach is None:
                reach = keys
            else:
                # a position is reachable when some reachable key lies 1..slop+1 before it, same page
                j = np.searchsorted(reach, keys, side="left") - 1
                ok = j >= 0
                prev = np.where(ok, reach[np.maximum(j, 0)], 0)
                gap = keys - prev
                reach = keys[ok & (gap >= 1) & (gap <= slop + 1)]
            if len(reach) == 0:
                return np.zeros(0, np.int32)
        return np.unique(reach // span).astype(np.int32)
