"""Character accuracy of OCR text against a reference: 1 - edit distance / reference length.

Both texts are normalised first, so layout differences that do not change what a reader or
a search index sees are not counted as errors: Unicode NFKC (ligatures such as 'ﬁ' become
'fi', '½' becomes '1⁄2'), typographic quotes and dashes folded to ASCII, and every run of
whitespace (spaces, newlines, blank lines) collapsed to one space. Case and punctuation
are kept. The edit distance is Levenshtein's (insert, delete, substitute cost 1), computed
with Hyyrö's bit-parallel algorithm on Python integers: O(len(a) * len(b) / 64) word
operations, so whole pages take milliseconds.
"""

from __future__ import annotations

import unicodedata

__all__ = ["normalize_text", "edit_distance", "char_accuracy"]

_FOLD = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "–": "-", "—": "-", "‐": "-", "‑": "-",
                       "\u00a0": " "})


def normalize_text(text: str) -> str:
    """NFKC, ASCII quotes and dashes, whitespace runs collapsed to one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).translate(_FOLD).split())


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance between two strings (bit-parallel, exact)."""
    if len(a) < len(b):
        a, b = b, a  # the pattern (bits) is the shorter string
    if not b:
        return len(a)
    m = len(b)
    full = (1 << m) - 1
    last = 1 << (m - 1)
    masks: dict[str, int] = {}
    for i, char in enumerate(b):
        masks[char] = masks.get(char, 0) | (1 << i)
    plus, minus, score = full, 0, m  # vertical +1 / -1 deltas of the DP column; score = D[m][j]
    for char in a:
        eq = masks.get(char, 0)
        xv = eq | minus
        xh = (((eq & plus) + plus) ^ plus) | eq
        hp = minus | (~(xh | plus) & full)
        hm = plus & xh
        if hp & last:
            score += 1
        elif hm & last:
            score -= 1
        hp = ((hp << 1) | 1) & full
        hm = (hm << 1) & full
        plus = hm | (~(xv | hp) & full)
        minus = hp & xv
    return score


def char_accuracy(hypothesis: str, reference: str) -> float:
    """1 - edit_distance / len(reference) on normalised texts, floored at 0 (1.0 = identical)."""
    hyp, ref = normalize_text(hypothesis), normalize_text(reference)
    if not ref:
        return 1.0 if not hyp else 0.0
    return max(0.0, 1.0 - edit_distance(hyp, ref) / len(ref))
