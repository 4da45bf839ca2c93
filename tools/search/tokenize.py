"""Tokenization for page search: one analyzer for indexing, querying and brute-force checks.

Choices, and why (documents are financial filings, forms, menus, memos):
- Numbers are whole tokens with thousands separators removed and trailing decimal
  zeros dropped: "$1,577" → "1577", "1,577.00" → "1577", "12.50%" → "12.5". bm25s's
  default regex splits "$1,577" into "1" and "577" and then drops the one-character "1";
  a value would never match its own page.
- Letters and digits stay together: "Q3" → "q3", "3M" → "3m", "FY2018" → "fy2018".
- Other punctuation splits: "10-K" → "10", "k" (adjacent positions). One-character
  tokens are KEPT (bm25s drops them), so "10-K" stays findable; in a query, a term that
  analyses into several tokens becomes a phrase, so `10-K` matches "10-K" and "10 K".
- Lower-cased with Unicode casefold; English stopwords removed (the bm25s list) and
  positions renumbered, as Whoosh's StopFilter does, so "bank of america" and
  "bank america" are the same phrase.
- No stemming: wildcards (`revenue*`) give users the prefix matching they ask for.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from bm25s.stopwords import STOPWORDS_EN

__all__ = ["Token", "analyze", "tokens", "normalize_token", "STOPWORDS", "ANALYZER_VERSION"]

ANALYZER_VERSION = 1  # bump when tokenization changes; indexes record it

# Numbers with thousands separators or decimals, not glued to letters; else runs of letters/digits.
_TOKEN_RE = re.compile(r"(?<![^\W_])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![^\W_])|(?<![^\W_])\d+\.\d+(?![^\W_])|[^\W_]+")

# bm25s's English stopword list, so results are comparable with bm25s out of the box.
STOPWORDS = frozenset(STOPWORDS_EN)


def normalize_token(raw: str) -> str:
    """Lower-case a raw token; strip thousands separators and trailing decimal zeros from numbers."""
    token = raw.casefold()
    if token[0].isdigit() and ("," in token or "." in token):
        token = token.replace(",", "")
        if "." in token:
            token = token.rstrip("0").rstrip(".")
    return token


class Token(tuple):
    """(text, position, start, end): normalised text, position after stopword removal, char span."""

    __slots__ = ()

    @property
    def text(self) -> str:
        return self[0]

    @property
    def position(self) -> int:
        return self[1]

    @property
    def start(self) -> int:
        return self[2]

    @property
    def end(self) -> int:
        return self[3]


def analyze(text: str, keep_stopwords: bool = False) -> Iterator[Token]:
    """Yield tokens with positions (renumbered over kept tokens) and character offsets."""
    position = 0
    for match in _TOKEN_RE.finditer(text):
        token = normalize_token(match.group())
        if not keep_stopwords and token in STOPWORDS:
            continue
        yield Token((token, position, match.start(), match.end()))
        position += 1


def tokens(text: str) -> list[str]:
    """The token strings of a text, in order (what the index stores)."""
    normalized = (normalize_token(m.group()) for m in _TOKEN_RE.finditer(text))
    return [token for token in normalized if token not in STOPWORDS]
