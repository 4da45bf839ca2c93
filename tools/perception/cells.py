"""Shared pieces of table and form recovery: words placed as units, phrases, pruning, table records.

A table is returned as `{"method", "box", "rows", "columns", "cells": [{"row", "column", "text",
"box", "color", "color_name", "fill", "fill_name"}]}`; rows and columns with no text in any cell
are dropped and the rest renumbered from 0; a fill the colour of the paper is reported as None.
"""

from __future__ import annotations

import numpy as np

from tools.perception.page import PageView, Word

__all__ = ["PHRASE_GAP", "CURRENCY", "box_of", "inside", "make_table", "no_paper", "phrases_of", "prune",
           "units_of", "words_line"]

PHRASE_GAP = 0.8  # words closer than this many line heights belong to one phrase (cell)
PAPER_DISTANCE = 25.0  # a fill this close (RGB distance) to the paper is no fill: reported as None


def no_paper(fill: str | None, paper: tuple[float, float, float]) -> str | None:
    if fill is None:
        return None
    rgb = [int(fill[i:i + 2], 16) for i in (1, 3, 5)]
    return None if float(np.linalg.norm(np.subtract(rgb, paper))) < PAPER_DISTANCE else fill


CURRENCY = {"$", "€", "£", "¥", "US$"}


def units_of(words: list[Word]) -> list[tuple[Word, tuple[float, float]]]:
    """Words with the point that places them in a cell; a lone currency sign joins the number after it.

    Statements print "$" in its own column left of the amount, so a grid whose column edges come
    from text alignment puts the sign in the previous cell; placing it with its number avoids that.
    The number is the nearest word to the sign's right on the same visual row, within 6 heights.
    """
    joined: dict[int, int] = {}  # index of a sign -> index of its number
    for i, sign in enumerate(words):
        if sign.text not in CURRENCY:
            continue
        height = sign.box[3] - sign.box[1]
        best = None
        for j, other in enumerate(words):
            gap = other.box[0] - sign.box[2]
            overlap = min(sign.box[3], other.box[3]) - max(sign.box[1], other.box[1])
            if j != i and -0.5 * height <= gap < 6 * height and overlap > 0.5 * height and other.text not in CURRENCY:
                if best is None or gap < words[best].box[0] - sign.box[2]:
                    best = j
        if best is not None and best not in joined.values():
            joined[i] = best
    numbers = {j: i for i, j in joined.items()}
    out = []
    for i, word in enumerate(words):
        if i in joined:
            continue  # emitted with its number
        if i in numbers:
            sign = words[numbers[i]]
            merged = Word(sign.text + word.text, (min(sign.box[0], word.box[0]), min(sign.box[1], word.box[1]),
                                                  max(sign.box[2], word.box[2]), max(sign.box[3], word.box[3])),
                          word.line, word.confidence)
            out.append((merged, word.center))
        else:
            out.append((word, word.center))
    return out


def inside(point, rect) -> bool:
    return rect[0] <= point[0] <= rect[2] and rect[1] <= point[1] <= rect[3]


def prune(cells: list[dict]) -> list[dict]:
    """Drop rows and columns with no text in any cell; keep cells with text or a fill; renumber from 0."""
    rows = sorted({c["row"] for c in cells if c["text"]})
    cols = sorted({c["column"] for c in cells if c["text"]})
    row_of = {r: i for i, r in enumerate(rows)}
    col_of = {c: i for i, c in enumerate(cols)}
    kept = [dict(c, row=row_of[c["row"]], column=col_of[c["column"]]) for c in cells
            if c["row"] in row_of and c["column"] in col_of and (c["text"] or c["fill"])]
    return sorted(kept, key=lambda c: (c["row"], c["column"]))


def make_table(cells: list[dict], bbox, method: str, view: PageView) -> dict | None:
    cells = prune(cells)
    if not cells:
        return None
    return {"method": method, "box": view.normalized(bbox), "rows": max(c["row"] for c in cells) + 1,
            "columns": max(c["column"] for c in cells) + 1, "cells": cells}


def words_line(words: list[Word]) -> str:
    out, previous = [], None
    for word in words:
        if previous is not None:
            out.append(" " if word.line == previous else "\n")
        out.append(word.text)
        previous = word.line
    return "".join(out)


def phrases_of(row: list[Word], height: float) -> list[list[Word]]:
    phrases: list[list[Word]] = []
    for word in row:
        if phrases and word.box[0] - phrases[-1][-1].box[2] < PHRASE_GAP * height:
            phrases[-1].append(word)
        else:
            phrases.append([word])
    return phrases


def box_of(words: list[Word]) -> tuple[float, float, float, float]:
    return (min(w.box[0] for w in words), min(w.box[1] for w in words),
            max(w.box[2] for w in words), max(w.box[3] for w in words))
