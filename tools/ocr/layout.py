"""Reading order for OCR engines that return text lines without a page structure (rapidocr, surya).

`reading_order(boxes)` groups line boxes into blocks and orders them the way a person reads:
columns left to right, each top to bottom. It is a recursive XY-cut with two refinements:

- horizontal bands that share a vertical gutter are read as one multi-column block, so two
  columns whose inter-line gaps happen to line up are not interleaved band by band;
- a vertical gutter whose two sides hold row-aligned boxes (a table, a label and its value)
  is not a column break: such rows are read left to right, one row at a time.

Boxes on the same visual row inside a block share a line number, so a table row reads as
one line. `split_line` spreads a line's box over its words when an engine gives no word boxes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["reading_order", "split_line", "rows_of", "core_box"]

# Column gutters must be at least this many median line heights wide.
GUTTER_HEIGHTS = 0.5
# Two boxes are on the same row when their vertical overlap is at least this share of the smaller height.
ROW_OVERLAP = 0.5
# A gutter is a table's (not a column break) when this share of the boxes beside it are row-aligned...
ALIGNED_SHARE = 0.6
# ... unless the boxes on both sides are long text lines (median width >= this many line heights):
# typeset columns often share a baseline grid, table cells and labels are short.
TEXT_LINE_HEIGHTS = 8.0


def core_box(quad: np.ndarray) -> np.ndarray:
    """Axis-aligned box of a (4, 2) quadrilateral, shrunk vertically to the text height.

    A skewed line's axis-aligned box is much taller than its text; using the mean edge height
    around the centre keeps neighbouring lines from overlapping.
    """
    quad = np.asarray(quad, np.float32).reshape(4, 2)
    x0, x1 = float(quad[:, 0].min()), float(quad[:, 0].max())
    left = float(np.linalg.norm(quad[3] - quad[0]))
    right = float(np.linalg.norm(quad[2] - quad[1]))
    height = max((left + right) / 2, 1.0)
    yc = float(quad[:, 1].mean())
    return np.array([x0, yc - height / 2, x1, yc + height / 2], np.float32)


def split_line(text: str, box) -> list[tuple[str, np.ndarray]]:
    """Words of a line with boxes spread over the line's box in proportion to their characters."""
    x0, y0, x1, y1 = (float(v) for v in box)
    words = text.split()
    if not words:
        return []
    total = max(len(text.strip()), 1)
    width = (x1 - x0) / total
    out: list[tuple[str, np.ndarray]] = []
    cursor = 0
    stripped = text.strip()
    for word in words:
        start = stripped.find(word, cursor)
        start = cursor if start < 0 else start
        end = start + len(word)
        out.append((word, np.array([x0 + start * width, y0, x0 + end * width, y1], np.float32)))
        cursor = end
    return out


def _height(boxes: np.ndarray) -> float:
    heights = boxes[:, 3] - boxes[:, 1]
    return float(np.median(heights)) if len(heights) else 1.0


def _intervals(starts: np.ndarray, ends: np.ndarray, gap: float) -> list[np.ndarray]:
    """Group items whose [start, end] intervals chain with gaps <= `gap`; groups in increasing order."""
    order = np.argsort(starts, kind="stable")
    groups: list[list[int]] = []
    reach = -np.inf
    for i in order:
        if not groups or starts[i] - reach > gap:
            groups.append([int(i)])
            reach = ends[i]
        else:
            groups[-1].append(int(i))
            reach = max(reach, ends[i])
    return [np.array(g) for g in groups]


def rows_of(boxes: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
    """Split boxes into visual rows (top to bottom), each sorted left to right."""
    idx = np.asarray(idx)
    order = idx[np.argsort((boxes[idx, 1] + boxes[idx, 3]) / 2, kind="stable")]
    rows: list[list[int]] = []
    for i in order:
        placed = False
        if rows:
            row = rows[-1]
            top = min(boxes[j, 1] for j in row)
            bottom = max(boxes[j, 3] for j in row)
            overlap = min(bottom, boxes[i, 3]) - max(top, boxes[i, 1])
            smaller = min(bottom - top, boxes[i, 3] - boxes[i, 1])
            if smaller > 0 and overlap >= ROW_OVERLAP * smaller:
                row.append(int(i))
                placed = True
        if not placed:
            rows.append([int(i)])
    return [np.array(sorted(r, key=lambda j: boxes[j, 0])) for r in rows]


def _columns(boxes: np.ndarray, idx: np.ndarray, gutter: float) -> list[np.ndarray]:
    parts = _intervals(boxes[idx, 0], boxes[idx, 2], gutter)
    return [idx[p] for p in parts]


def _aligned(boxes: np.ndarray, columns: list[np.ndarray], height: float) -> bool:
    """True when boxes on either side of each gutter sit on shared rows (a table, not text columns)."""
    def long_lines(side: np.ndarray) -> bool:
        return float(np.median(boxes[side, 2] - boxes[side, 0])) >= TEXT_LINE_HEIGHTS * height

    for left, right in zip(columns, columns[1:]):
        if long_lines(left) and long_lines(right):
            return False
        small, other = (left, right) if len(left) <= len(right) else (right, left)
        centres = (boxes[other, 1] + boxes[other, 3]) / 2
        hits = sum(1 for i in small if np.min(np.abs(centres - (boxes[i, 1] + boxes[i, 3]) / 2)) < 0.35 * height)
        if hits < ALIGNED_SHARE * len(small):
            return False
    return True


def _has_columns(boxes: np.ndarray, idx: np.ndarray, gutter: float, height: float) -> bool:
    columns = _columns(boxes, idx, gutter)
    return len(columns) > 1 and not _aligned(boxes, columns, height)


def reading_order(boxes: np.ndarray) -> list[list[list[int]]]:
    """Order line boxes for reading.

    Args:
        boxes: float (n, 4) x0, y0, x1, y1 of text lines (any unit, origin top-left).

    Returns:
        Blocks in reading order; each block is a list of rows, each row a list of box indices
        left to right.
    """
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    if len(boxes) == 0:
        return []
    height = _height(boxes)
    gutter = GUTTER_HEIGHTS * height
    blocks: list[list[list[int]]] = []

    def raster(idx: np.ndarray) -> None:
        blocks.append([row.tolist() for row in rows_of(boxes, idx)])

    def visit(idx: np.ndarray) -> None:
        if len(idx) <= 1:
            raster(idx)
            return
        columns = _columns(boxes, idx, gutter)
        if len(columns) > 1 and not _aligned(boxes, columns, height):
            for column in columns:
                visit(column)
            return
        bands = [idx[b] for b in _intervals(boxes[idx, 1], boxes[idx, 3], 0.0)]
        if len(bands) == 1:
            raster(idx)
            return
        groups: list[np.ndarray] = [bands[0]]
        for band in bands[1:]:
            merged = np.concatenate([groups[-1], band])
            if _has_columns(boxes, merged, gutter, height):
                groups[-1] = merged
            else:
                groups.append(band)
        if len(groups) == 1:  # every band shares the gutter, yet the whole has none usable: read rows
            raster(idx)
            return
        # Consecutive single-column groups read as one block (a paragraph) unless a gap of more
        # than a line height separates them; multi-column groups are cut into their columns.
        plain: list[np.ndarray] = []
        for group in groups:
            if _has_columns(boxes, group, gutter, height):
                if plain:
                    raster(np.concatenate(plain))
                    plain = []
                visit(group)
                continue
            if plain and boxes[group, 1].min() - boxes[np.concatenate(plain), 3].max() > height:
                raster(np.concatenate(plain))
                plain = []
            plain.append(group)
        if plain:
            raster(np.concatenate(plain))

    visit(np.arange(len(boxes)))
    return [block for block in blocks if block]
