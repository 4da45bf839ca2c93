"""HEAVEN's "key tokens" without a POS tagger: the query's content words.

HEAVEN (Kim et al. 2025; MADQA appendix G.3) scores its first multi-vector pass with only the
query's noun tokens. We have no offline tagger, so the heuristic keeps content words: a word
(sub-word pieces grouped back into words) is key unless it is an English stopword (bm25s's
list), a question or auxiliary word, or carries no letter or digit. Numbers and names stay (they
are what financial questions hinge on); verbs and adjectives stay too, which a tagger would drop.
Special, prefix and padding tokens of the encoder are never key. When no word qualifies (e.g.
"what is it?"), every token is key, so the pass degenerates to full MaxSim rather than to nothing.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["is_key_word", "key_token_mask", "words_of_pieces", "QUESTION_WORDS"]

QUESTION_WORDS = frozenset("""
what which who whom whose when where why how whether is are was were be been being am do does did
done has have had having can could shall should will would may might must please tell give list
show find describe explain according many much also per via the a an
""".split())

_HAS_ALNUM = re.compile(r"[0-9A-Za-z\u00C0-\uFFFF]")


@lru_cache(maxsize=1)
def _non_key_words() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN) | QUESTION_WORDS


def is_key_word(word: str) -> bool:
    """True for a content word (see module docstring)."""
    lowered = re.sub(r"^\W+|\W+$", "", word.lower())  # "3M?" -> "3m", "what?" -> "what"
    if len(lowered) == 1 and not lowered.isdigit():  # "s" of "'s", stray letters
        return False
    return bool(_HAS_ALNUM.search(lowered)) and lowered not in _non_key_words()


def key_token_mask(words_of_tokens: list[str | None]) -> list[bool]:
    """Key flags for tokens, given the word each token belongs to (None: special/prefix/padding token).

    Falls back to every real token when no token is key.
    """
    mask = [w is not None and is_key_word(w) for w in words_of_tokens]
    if not any(mask):
        mask = [w is not None for w in words_of_tokens]
        if not any(mask):
            mask = [True] * len(words_of_tokens)
    return mask


def words_of_pieces(pieces: list[str], special: list[bool], query_text: str,
                    word_starts: list[bool] | None = None) -> list[str | None]:
    """The query word each token belongs to, for byte-level BPE / SentencePiece tokens.

    `pieces` are the tokens decoded one by one; a token starts a new word when `word_starts`
    says so (e.g. its raw form begins with "Ġ" or "▁") or its text begins with whitespace.
    Special tokens, and tokens of words that are not in `query_text` (an encoder's prompt
    prefix such as "Query:"), map to None.
    """
    query_words = set(re.findall(r"\w+", query_text.lower()))
    groups: list[tuple[int, int]] = []
    open_group = False
    for i, (piece, is_special) in enumerate(zip(pieces, special)):
        if is_special or not piece.strip():
            open_group = False
            continue
        starts = piece[:1].isspace() or (word_starts is not None and word_starts[i])
        if open_group and not starts:
            groups[-1] = (groups[-1][0], i + 1)
        else:
            groups.append((i, i + 1))
            open_group = True
    out: list[str | None] = [None] * len(pieces)
    for lo, hi in groups:
        word = "".join(pieces[lo:hi]).strip()
        parts = re.findall(r"\w+", word.lower())
        if parts and all(part in query_words for part in parts):
            for i in range(lo, hi):
                out[i] = word
    return out
