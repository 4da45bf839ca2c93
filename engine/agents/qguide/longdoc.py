"""Long documents: overlapping page chunks, and the confidence-weighted majority over their answers (Eq. 4).

Each chunk of `size` pages (consecutive chunks share `overlap` pages) is answered by its own
Q-Guide loop. The adjudicator combines the chunk answers by weighted vote,
    â = argmax_v Σ_{j: a_j = v} w(σ_j),   w(low, med, high) = (1, 2, 3),
answers compared after normalisation (case, spaces, thousands separators, end punctuation).
Abstentions ("Unknown") do not vote: a chunk that does not hold the evidence says so, and
letting those votes count would make "Unknown" win every long document; when every chunk
abstains the answer is "Unknown". A tie between the leading answers goes to one arbitration
call that sees the competing answers and their observations (`engine/agents/qguide/chunked.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engine.agents.qguide.gate import UNKNOWN

__all__ = ["WEIGHTS", "chunk_ranges", "ChunkAnswer", "Adjudication", "adjudicate", "normalise_answer", "is_unknown"]

WEIGHTS = {"low": 1, "med": 2, "high": 3}
_SPACES = re.compile(r"\s+")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def chunk_ranges(pages: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Inclusive 1-based page ranges covering `pages` pages, each `size` long, sharing `overlap` pages.

    >>> chunk_ranges(8, 4, 1)
    [(1, 4), (4, 7), (7, 8)]
    """
    if pages < 1:
        raise ValueError(f"a document has at least one page, got {pages}")
    if size < 1 or not 0 <= overlap < size:
        raise ValueError(f"need chunk size >= 1 and 0 <= overlap < size, got size {size}, overlap {overlap}")
    ranges, start = [], 1
    while True:
        end = min(start + size - 1, pages)
        ranges.append((start, end))
        if end == pages:
            return ranges
        start = end - overlap + 1


def normalise_answer(answer: list[str] | str) -> str:
    parts = answer if isinstance(answer, list) else [answer]
    text = " | ".join(_SPACES.sub(" ", _THOUSANDS.sub("", str(p))).strip().strip(".,;:").lower() for p in parts)
    return text


def is_unknown(answer: list[str] | str | None) -> bool:
    return answer is None or normalise_answer(answer) in ("", UNKNOWN.lower())


@dataclass(slots=True, frozen=True)
class ChunkAnswer:
    answer: list[str]  # the chunk's final answer (after its gate); ["Unknown"] for an abstention
    confidence: str | None  # the submission's confidence level; None when the chunk never submitted


@dataclass(slots=True)
class Adjudication:
    votes: dict[str, int] = field(default_factory=dict)  # normalised answer -> summed weight
    winner: int | None = None  # index of the chunk whose answer wins; None on a tie or when all abstained
    tied: list[int] = field(default_factory=list)  # for a tie: the first chunk of each leading answer, in chunk order

    def to_json(self) -> dict:
        return {"votes": self.votes, "winner": self.winner, "tied": self.tied}


def adjudicate(answers: list[ChunkAnswer]) -> Adjudication:
    """The confidence-weighted majority over chunk answers (see the module docstring)."""
    result = Adjudication()
    first: dict[str, int] = {}  # normalised answer -> first chunk giving it
    for index, item in enumerate(answers):
        if is_unknown(item.answer) or item.confidence is None:
            continue
        key = normalise_answer(item.answer)
        result.votes[key] = result.votes.get(key, 0) + WEIGHTS[item.confidence]
        first.setdefault(key, index)
    if not result.votes:
        return result
    best = max(result.votes.values())
    leaders = [key for key, weight in result.votes.items() if weight == best]
    if len(leaders) == 1:
        result.winner = first[leaders[0]]
    else:
        result.tied = sorted(first[key] for key in leaders)
    return result
