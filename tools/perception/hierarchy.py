"""Layout and hierarchy of a page region: blocks in reading order, their roles, headings and sections.

The structure tool's `kind="layout"` (Q-Guide's "structure layout recovery ... hierarchical
text structure, and layout information"). From the region's words (text layer, or OCR):

1. words are grouped into lines (the `line` id the store or the OCR engine gave them) and each
   line gets its box and its text height (the box height, a proxy for the font size);
2. `tools.ocr.layout.reading_order` (the recursive XY-cut the OCR backends use) groups the line
   boxes into blocks and orders them: columns left to right, each top to bottom; a block is cut
   where the text height changes by SPLIT_RATIO (a heading right above its paragraph);
3. each block gets a role from its text height against the region's median line height
   (`body`): a short block (at most HEADING_WORDS words, at most two lines) set at least
   HEADING_RATIO × body is a heading; a short block numbered like "2.1 Methods" is a heading
   even at body size; a block set at most CAPTION_RATIO × body is small print ("caption");
   the rest are paragraphs;
4. heading levels: the distinct heading sizes, largest first, are levels 1, 2, ... (a number's
   depth, "2.1" = 2, decides among headings of one size), and every block after a heading
   belongs to its section, nested by level.

Returns plain lists and dicts (boxes as fractions of the page) for the observation.
"""

from __future__ import annotations

import re

import numpy as np

from tools.ocr.layout import reading_order
from tools.perception.page import PageView, Word

__all__ = ["page_layout", "HEADING_RATIO", "CAPTION_RATIO", "HEADING_WORDS"]

HEADING_RATIO = 1.25  # a heading's text is at least this many times the body's height
CAPTION_RATIO = 0.8  # small print: at most this share of the body's height
HEADING_WORDS = 12  # a heading is short
SPLIT_RATIO = 1.15  # consecutive rows whose text heights differ by this factor are different blocks
_NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.?\s+\S")  # "2", "2.1", "3.1.4 Title"


def _lines(words: list[Word]) -> list[tuple[str, np.ndarray]]:
    """(text, box) of each line, in the words' order."""
    grouped: dict[tuple[int, int], list[Word]] = {}
    for word in words:
        grouped.setdefault(word.line, []).append(word)
    lines = []
    for members in grouped.values():
        boxes = np.array([w.box for w in members], np.float32)  # (words, 4)
        box = np.array([boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max()], np.float32)
        lines.append((" ".join(w.text for w in members), box))
    return lines


def _split_by_size(rows: list[list[int]], heights: np.ndarray) -> list[list[list[int]]]:
    """A block cut where the text size changes (a heading set right above its paragraph reads as one block)."""
    parts: list[list[list[int]]] = [[rows[0]]]
    for previous, row in zip(rows, rows[1:]):
        before, now = float(heights[previous].max()), float(heights[row].max())
        if max(before, now) >= SPLIT_RATIO * min(before, now):
            parts.append([row])
        else:
            parts[-1].append(row)
    return parts


def _role(text: str, height: float, rows: int, body: float) -> str:
    short = len(text.split()) <= HEADING_WORDS and rows <= 2
    if short and (height >= HEADING_RATIO * body or (_NUMBERED.match(text) and not text.rstrip().endswith("."))):
        return "heading"
    if height <= CAPTION_RATIO * body:
        return "caption"
    return "paragraph"


def page_layout(view: PageView, words: list[Word]) -> dict:
    """The layout of `words` (a region of `view`): blocks, headings and sections.

    Returns:
        {"blocks": [{"index", "role", "text", "box", "text_height"}] in reading order,
         "headings": [{"block", "level", "text"}], "sections": [{"heading", "level", "text",
         "blocks": [block indices], "parent": section index or None}], "columns": the most
         blocks side by side on one band}; indices count from 0, boxes are fractions of the page.
    """
    lines = _lines(words)
    if not lines:
        return {"blocks": [], "headings": [], "sections": [], "columns": 0}
    boxes = np.stack([box for _, box in lines])  # (lines, 4) page points
    heights = boxes[:, 3] - boxes[:, 1]
    body = float(np.median(heights))
    blocks = []
    for order in (part for block in reading_order(boxes) for part in _split_by_size(block, heights)):
        members = [i for row in order for i in row]
        box = [float(boxes[members, 0].min()), float(boxes[members, 1].min()),
               float(boxes[members, 2].max()), float(boxes[members, 3].max())]
        text = "\n".join(" ".join(lines[i][0] for i in row) for row in order)
        height = float(np.median(heights[members]))
        blocks.append({"index": len(blocks), "role": _role(text, height, len(order), body), "text": text,
                       "box": [round(v, 4) for v in view.normalized(box)], "text_height": round(height, 2),
                       "_points": box})
    headings = _headings(blocks)
    sections = _sections(blocks, headings)
    columns = _columns(blocks)
    for block in blocks:
        del block["_points"]
    return {"blocks": blocks, "headings": headings, "sections": sections, "columns": columns}


def _headings(blocks: list[dict]) -> list[dict]:
    heads = [b for b in blocks if b["role"] == "heading"]
    sizes = sorted({round(b["text_height"], 1) for b in heads}, reverse=True)

    def depth(text: str) -> int:
        match = _NUMBERED.match(text)
        return match.group(1).count(".") + 1 if match else 0

    ranks = sorted({(sizes.index(round(b["text_height"], 1)), depth(b["text"])) for b in heads})
    return [{"block": b["index"], "level": ranks.index((sizes.index(round(b["text_height"], 1)), depth(b["text"]))) + 1,
             "text": b["text"].replace("\n", " ")} for b in heads]


def _sections(blocks: list[dict], headings: list[dict]) -> list[dict]:
    """One section per heading; the blocks after it (to the next heading) are its body, nested by level."""
    sections: list[dict] = []
    open_by_level: list[int] = []  # indices of the open sections, outermost first
    by_block = {h["block"]: h for h in headings}
    for block in blocks:
        head = by_block.get(block["index"])
        if head is not None:
            while open_by_level and sections[open_by_level[-1]]["level"] >= head["level"]:
                open_by_level.pop()
            sections.append({"heading": block["index"], "level": head["level"], "text": head["text"], "blocks": [],
                             "parent": open_by_level[-1] if open_by_level else None})
            open_by_level.append(len(sections) - 1)
        elif open_by_level:
            sections[open_by_level[-1]]["blocks"].append(block["index"])
    return sections


def _columns(blocks: list[dict]) -> int:
    """The most blocks that share one horizontal band without overlapping horizontally (side by side)."""
    best = 1
    for block in blocks:
        y0, y1 = block["_points"][1], block["_points"][3]
        beside = [b for b in blocks if b["_points"][1] < y1 and b["_points"][3] > y0]
        spans = sorted((b["_points"][0], b["_points"][2]) for b in beside)
        count, right = 0, -np.inf
        for x0, x1 in spans:
            if x0 >= right:
                count, right = count + 1, x1
            else:
                right = min(right, x1)
        best = max(best, count)
    return best
