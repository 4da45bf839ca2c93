"""Tables on scanned pages: clustering OCR word boxes into rows and columns.

Words become rows (vertical overlap), words of a row become phrases (gaps under ~0.8 line
heights), rows with two or more phrases are table rows, consecutive table rows form a table,
and column boundaries are the x ranges that (almost) no phrase of the table covers. Colours
are sampled from the pixels of each cell: the fill is the cell's dominant colour, the text
colour that of its words' glyph cores.
"""

from __future__ import annotations

import numpy as np

from tools.ocr.layout import rows_of
from tools.perception.cells import box_of, make_table, no_paper, phrases_of, units_of
from tools.perception.colors import color_name, patch_colors
from tools.perception.page import PageView, Word

__all__ = ["ocr_tables"]


def _column_ranges(phrase_boxes: list[tuple], rows: int) -> list[tuple[float, float]]:
    """X ranges between gaps that at most a tenth of the rows cover (a spanning title does not merge columns)."""
    left = min(b[0] for b in phrase_boxes)
    right = max(b[2] for b in phrase_boxes)
    edges = np.linspace(left, right, max(int(right - left) * 2, 2))  # half-point resolution
    cover = np.zeros(len(edges), np.int32)
    for b in phrase_boxes:
        cover[(edges >= b[0]) & (edges <= b[2])] += 1
    occupied = cover > rows // 10
    ranges, start = [], None
    for x, busy in zip(edges, occupied):
        if busy and start is None:
            start = x
        elif not busy and start is not None:
            ranges.append((start, x))
            start = None
    if start is not None:
        ranges.append((start, edges[-1]))
    return ranges


def ocr_tables(view: PageView, rect, words: list[Word], image: np.ndarray | None) -> list[dict]:
    """Tables clustered from OCR words (displayed-page points) of a region; `image` renders `rect` for colours."""
    words = [word for word, _ in units_of(words)]
    if len(words) < 4:
        return []
    boxes = np.array([w.box for w in words], np.float32)
    height = float(np.median(boxes[:, 3] - boxes[:, 1]))
    rows = [[words[i] for i in row] for row in rows_of(boxes, np.arange(len(words)))]
    phrased = [phrases_of(row, height) for row in rows]
    runs: list[list[int]] = []  # consecutive rows with >= 2 phrases (a single-phrase row may sit inside)
    for index, phrases in enumerate(phrased):
        multi = len(phrases) >= 2
        if multi and runs and index - runs[-1][-1] <= 2:
            runs[-1].extend(range(runs[-1][-1] + 1, index + 1))
        elif multi:
            runs.append([index])
    paper = _paper(image)
    tables = []
    for run in runs:
        table_rows = [phrased[i] for i in run]
        if sum(1 for p in table_rows if len(p) >= 2) < 2:
            continue
        ranges = _column_ranges([box_of(p) for row in table_rows if len(row) >= 2 for p in row],
                                sum(1 for row in table_rows if len(row) >= 2))
        if len(ranges) < 2:
            continue
        row_boxes = [box_of([w for p in row for w in p]) for row in table_rows]
        cells = []
        for r, row in enumerate(table_rows):
            top = row_boxes[r][1] if r == 0 else (row_boxes[r - 1][3] + row_boxes[r][1]) / 2
            bottom = row_boxes[r][3] if r == len(table_rows) - 1 else (row_boxes[r][3] + row_boxes[r + 1][1]) / 2
            by_column: dict[int, list[Word]] = {}
            for phrase in row:
                center = (box_of(phrase)[0] + box_of(phrase)[2]) / 2
                column = min(range(len(ranges)), key=lambda c: 0 if ranges[c][0] <= center <= ranges[c][1]
                             else min(abs(center - ranges[c][0]), abs(center - ranges[c][1])))
                by_column.setdefault(column, []).extend(phrase)
            for c, (x0, x1) in enumerate(ranges):
                left = x0 if c == 0 else (ranges[c - 1][1] + x0) / 2
                right = x1 if c == len(ranges) - 1 else (x1 + ranges[c + 1][0]) / 2
                cell_box = (left, top, right, bottom)
                members = by_column.get(c, [])
                text_color, fill = _cell_colors(image, rect, cell_box, members)
                fill = no_paper(fill, paper)
                cells.append({"row": r, "column": c, "text": " ".join(w.text for w in members),
                              "box": view.normalized(cell_box), "color": text_color, "color_name": color_name(text_color),
                              "fill": fill, "fill_name": color_name(fill)})
        table = make_table(cells, (ranges[0][0], row_boxes[0][1], ranges[-1][1], row_boxes[-1][3]), "ocr-clusters", view)
        if table is not None:
            tables.append(table)
    return tables


def _paper(image: np.ndarray | None) -> tuple[float, float, float]:
    """The page's background colour: the most frequent colour of the rendered region."""
    if image is None or image.size == 0:
        return (255.0, 255.0, 255.0)
    background = patch_colors(image)[1]
    return tuple(float(int(background[i:i + 2], 16)) for i in (1, 3, 5))


def _cell_colors(image: np.ndarray | None, rect, cell_box, members: list[Word]) -> tuple[str | None, str | None]:
    if image is None:
        return None, None
    sx = image.shape[1] / max(rect[2] - rect[0], 1e-6)
    sy = image.shape[0] / max(rect[3] - rect[1], 1e-6)

    def patch(box, inset: float = 0.0):
        x0, y0 = int((box[0] - rect[0]) * sx + inset), int((box[1] - rect[1]) * sy + inset)
        x1, y1 = int((box[2] - rect[0]) * sx - inset), int((box[3] - rect[1]) * sy - inset)
        return image[max(y0, 0):max(y1, 0), max(x0, 0):max(x1, 0)]

    _, fill = patch_colors(patch(cell_box, inset=2))
    text = patch_colors(patch(box_of(members)))[0] if members else None
    return text, fill
