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
- CJK text (Han, kana, Hangul) has no spaces between words, so each run of CJK characters
  becomes its overlapping character bigrams, one position each (Lucene's CJKBigramFilter):
  "营业收入" → "营业", "业收", "收入". A two-character query is one bigram and finds its
  page; a longer one analyses into several bigrams and so becomes a phrase, which matches
  the characters in order. A one-character run stays a unigram (a one-character query finds
  only those; `银*` finds the bigrams starting with it). The run is cut from the text around
  it before the rest is tokenised, so "2019年" is "2019", "年" and "收入1,577元" keeps "1577".
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Token", "analyze", "tokens", "normalize_token", "STOPWORDS", "ANALYZER_VERSION", "index_compatible"]

ANALYZER_VERSION = 2  # bump when tokenization changes; indexes record it (2: CJK bigrams)

# Numbers with thousands separators or decimals, not glued to letters; else runs of letters/digits.
_TOKEN_RE = re.compile(r"(?<![^\W_])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![^\W_])|(?<![^\W_])\d+\.\d+(?![^\W_])|[^\W_]+")

# Han (with extensions and compatibility ideographs, 々), Hiragana, Katakana (with half-width), Hangul.
_CJK_CHARS = ("\u1100-\u11ff\u3005\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
              "\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f")
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")

# bm25s's English stopword list, so results are comparable with bm25s out of the box.


def _bm25s_stopwords() -> tuple[str, ...]:
    """bm25s's English stopword list, read from its module file without importing the bm25s package.

    `import bm25s.stopwords` runs bm25s/__init__, which imports numba and scipy.sparse: 0.2 s of a cold
    `dossier search` that needs neither. bm25s/stopwords.py is a plain tuple with no imports.
    """
    package = importlib.util.find_spec("bm25s")
    if package is None or not package.submodule_search_locations:
        raise ImportError("bm25s is not installed; install it with: pip install bm25s")
    path = Path(next(iter(package.submodule_search_locations))) / "stopwords.py"
    spec = importlib.util.spec_from_file_location("bm25s_stopwords_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.STOPWORDS_EN


STOPWORDS = frozenset(_bm25s_stopwords())


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


def _spans(text: str, offset: int = 0) -> Iterator[tuple[str, int, int]]:
    """(normalised token, start, end) of text without CJK characters."""
    for match in _TOKEN_RE.finditer(text):
        yield normalize_token(match.group()), offset + match.start(), offset + match.end()


def _raw_tokens(text: str) -> Iterator[tuple[str, int, int]]:
    """Every token with its character span, stopwords included; CJK runs as bigrams."""
    if not _CJK_RUN.search(text):
        yield from _spans(text)
        return
    cursor = 0
    for run in _CJK_RUN.finditer(text):
        yield from _spans(text[cursor:run.start()], cursor)  # cut out, so CJK is a token boundary
        chars, start = run.group(), run.start()
        if len(chars) == 1:
            yield chars, start, start + 1
        for i in range(len(chars) - 1):
            yield chars[i:i + 2], start + i, start + i + 2
        cursor = run.end()
    yield from _spans(text[cursor:], cursor)


def analyze(text: str, keep_stopwords: bool = False) -> Iterator[Token]:
    """Yield tokens with positions (renumbered over kept tokens) and character offsets."""
    position = 0
    for token, start, end in _raw_tokens(text):
        if not keep_stopwords and token in STOPWORDS:
            continue
        yield Token((token, position, start, end))
        position += 1


def tokens(text: str) -> list[str]:
    """The token strings of a text, in order (what the index stores)."""
    if not _CJK_RUN.search(text):
        normalized = (normalize_token(m.group()) for m in _TOKEN_RE.finditer(text))
        return [token for token in normalized if token not in STOPWORDS]
    return [token for token, _, _ in _raw_tokens(text) if token not in STOPWORDS]


def index_compatible(version: int | None, vocab) -> bool:
    """Whether an index built by analyzer `version` reads right with this one.

    Version 1 differs only on CJK text (whole runs instead of bigrams), so an index of it
    whose vocabulary holds no CJK character is still exact and need not be rebuilt.
    """
    if version == ANALYZER_VERSION:
        return True
    return version == 1 and not _CJK_RUN.search("".join(str(word) for word in vocab))
