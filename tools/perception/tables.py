"""Tables as cells with row, column, text, text colour and fill colour.

Text-layer pages: PyMuPDF's table finder (`page.find_tables`) gives the cell grid, with the
strategy (ruling lines; horizontal rules with text-aligned columns; text alignment) whose
tables hold the most words in rows of two or more filled cells; each cell's text
is made of the text-layer words whose centres fall in it (PyMuPDF's own `extract()` glues
characters without spaces on many PDFs), its text colour comes from the text spans, and
its fill is the topmost filled rectangle under its centre (`page.get_drawings()`, drawing
order = paint order).

Scanned pages: OCR words are clustered. Words become rows (vertical overlap), words of a
row become phrases (gaps under ~0.8 line heights), rows with two or more phrases are table
rows, consecutive table rows form a table, and column boundaries are the x ranges that
(almost) no phrase of the table covers. Colours are sampled from the pixels of each cell.

Columns and rows that are empty in every cell are dropped and the rest renumbered from 0.
"""

from __future__ import annotations

import numpy as np

from tools.ocr.layout import rows_of
from tools.perception.colors import color_name, hex_color, patch_colors
from tools.perception.page import PageView, Word

__all__ = ["pdf_tables", "ocr_tables"]

PHRASE_GAP = 0.8  # words closer than this many line heights belong to one phrase (cell)
PAPER_DISTANCE = 25.0  # a fill this close (RGB distance) to the paper is no fill: reported as None


def _no_paper(fill: str | None, paper: tuple[float, float, float]) -> str | None:
    if fill is None:
        return None
    rgb = [int(fill[i:i + 2], 16) for i in (1, 3, 5)]
    return None if float(np.linalg.norm(np.subtract(rgb, paper))) < PAPER_DISTANCE else fill


# PyMuPDF find_tables strategies, all tried: ruled grids; rules across with columns from text
# alignment (financial statements); text alignment alone. `use_layout=False` always: Dossier keeps
# PyMuPDF's ONNX layout analyser unloaded (tools/__init__.py), and results must not depend on
# import order.
STRATEGIES = (
    ("lines", {"strategy": "lines"}),
    ("rules+text", {"horizontal_strategy": "lines", "vertical_strategy": "text"}),
    ("text", {"strategy": "text"}),
)
CURRENCY = {"$", "€", "£", "¥", "US$"}


def _units(words: list[Word]) -> list[tuple[Word, tuple[float, float]]]:
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


def _place(grid: list[list[tuple | None]], units) -> dict[tuple[int, int], list[Word]]:
    """Put words in a grid's cells (all in displayed-page points).

    Rows come from the cell holding a word's anchor point. Columns are then settled by x extent:
    a data column (words from 3 or more rows) spans the 10th-90th percentile range of its words'
    edges, and a word overlapping a data column's span more than its own column's goes there (a
    word outside its own data column's span goes to the nearest span). A
    year centred over "$ 5,363" lies left of the cell edge found from text alignment, or in a
    column of its own; by overlap it lands over its numbers. A word continuing a phrase (same
    line, a small gap after the previous word) stays with that phrase.
    """
    placed: list[tuple[Word, int, int]] = []
    for word, point in units:
        for r, row in enumerate(grid):
            hit = next((c for c, cell in enumerate(row) if cell is not None and _inside(point, cell)), None)
            if hit is not None:
                placed.append((word, r, hit))
                break
    columns: dict[int, list[tuple[Word, int]]] = {}
    for word, r, c in placed:
        columns.setdefault(c, []).append((word, r))
    spans = {c: (float(np.percentile([w.box[0] for w, _ in ws], 10)), float(np.percentile([w.box[2] for w, _ in ws], 90)))
             for c, ws in columns.items() if len({r for _, r in ws}) >= 3}

    def overlap(word: Word, column: int) -> float:
        if column not in spans:
            return 0.0
        return min(spans[column][1], word.box[2]) - max(spans[column][0], word.box[0])

    cells: dict[tuple[int, int], list[Word]] = {}
    previous: tuple[Word, int, int] | None = None
    for word, r, c in placed:
        column = c
        height = word.box[3] - word.box[1]
        if (previous is not None and previous[1] == r and previous[0].line == word.line
                and 0 <= word.box[0] - previous[0].box[2] < PHRASE_GAP * height):
            column = previous[2]
        elif spans:
            best = max(spans, key=lambda k: overlap(word, k))
            own = overlap(word, c)
            outside_own = c in spans and own <= 0  # e.g. a header left of its numbers' cell edge
            if best != c and grid[r][best] is not None and (overlap(word, best) > max(own, 0.0)
                                                             or (outside_own and overlap(word, best) > own)):
                column = best
        cells.setdefault((r, column), []).append(word)
        previous = (word, r, column)
    return cells


def _score(grid: list[list[tuple | None]], units) -> int:
    """Words in rows of two or more filled cells, minus words in such rows' cells that hold several lines.

    A row with one filled cell is prose, not a table row; a cell holding several lines usually
    means the grid put two columns' (or two rows') words together.
    """
    rows: dict[int, list[list[Word]]] = {}
    for (r, _), words in _place(grid, units).items():
        rows.setdefault(r, []).append(words)
    score = 0
    for cells in rows.values():
        if len(cells) >= 2:
            score += sum(len(ws) if len({w.line for w in ws}) == 1 else -len(ws) for ws in cells)
    return score


def _rgb_hex(color) -> str | None:
    if color is None:
        return None
    return hex_color([float(c) * 255 for c in color[:3]])


def _inside(point, rect) -> bool:
    return rect[0] <= point[0] <= rect[2] and rect[1] <= point[1] <= rect[3]


def _transform(box, matrix) -> tuple[float, float, float, float]:
    import pymupdf

    r = pymupdf.Rect(box) * pymupdf.Matrix(*matrix)
    return (r.x0, r.y0, r.x1, r.y1)


def _fills(pdf_page) -> list[tuple[tuple[float, float, float, float], str]]:
    """Filled rectangles in paint order (unrotated frame) with their '#rrggbb' fill."""
    out = []
    for path in pdf_page.get_drawings():
        fill = path.get("fill")
        if fill is None or (path.get("fill_opacity") or 1.0) <= 0:
            continue
        color = _rgb_hex(fill)
        rects = [tuple(item[1]) for item in path["items"] if item[0] == "re"]
        rects += [tuple(item[1].rect) for item in path["items"] if item[0] == "qu"]
        for rect in rects or [tuple(path["rect"])]:
            out.append((rect, color))
    return out


def _spans(pdf_page) -> list[tuple[tuple[float, float, float, float], str, int]]:
    """Text spans (unrotated frame): box, '#rrggbb' colour, characters."""
    out = []
    for block in pdf_page.get_text("dict")["blocks"]:
        for line in block.get("lines", []):
            for span in line["spans"]:
                if span["text"].strip():
                    out.append((tuple(span["bbox"]), f"#{span['color']:06x}", len(span["text"].strip())))
    return out


def _prune(cells: list[dict]) -> list[dict]:
    """Drop rows and columns with no text in any cell; keep cells with text or a fill; renumber from 0."""
    rows = sorted({c["row"] for c in cells if c["text"]})
    cols = sorted({c["column"] for c in cells if c["text"]})
    row_of = {r: i for i, r in enumerate(rows)}
    col_of = {c: i for i, c in enumerate(cols)}
    kept = [dict(c, row=row_of[c["row"]], column=col_of[c["column"]]) for c in cells
            if c["row"] in row_of and c["column"] in col_of and (c["text"] or c["fill"])]
    return sorted(kept, key=lambda c: (c["row"], c["column"]))


def _table(cells: list[dict], bbox, method: str, view: PageView) -> dict | None:
    cells = _prune(cells)
    if not cells:
        return None
    return {"method": method, "box": view.normalized(bbox), "rows": max(c["row"] for c in cells) + 1,
            "columns": max(c["column"] for c in cells) + 1, "cells": cells}


def pdf_tables(view: PageView, rect) -> list[dict]:
    """Tables in a region (displayed-page points) of a text-layer page."""
    import pymupdf

    pymupdf.no_recommend_layout()  # find_tables would print an install hint on stdout (breaks JSON output)
    units = _units(view.words())
    with pymupdf.open(view.pdf_path) as doc:
        pdf_page = doc.load_page(view.page - 1)
        rotation, derotation = tuple(pdf_page.rotation_matrix), tuple(pdf_page.derotation_matrix)
        clip = pymupdf.Rect(_transform(rect, derotation))
        best, best_score, method = [], 0, ""
        for name, options in STRATEGIES:
            found = []
            for table in pdf_page.find_tables(clip=clip, use_layout=False, **options).tables:
                if table.row_count >= 2 and table.col_count >= 2:
                    grid = [[None if c is None else _transform(c, rotation) for c in row.cells] for row in table.rows]
                    found.append((_transform(table.bbox, rotation), grid, [[c for c in row.cells] for row in table.rows]))
            score = sum(_score(grid, units) for _, grid, _ in found)
            if score > best_score:
                best, best_score, method = found, score, f"pymupdf-{name}"
        if not best:
            return []
        fills, spans = _fills(pdf_page), _spans(pdf_page)
    tables = []
    for bbox, grid, raw in best:
        placed = _place(grid, units)
        cells = []
        for r, row in enumerate(grid):
            for c, shown in enumerate(row):
                if shown is None:
                    continue  # covered by a merged cell
                cell = raw[r][c]  # unrotated frame, as drawings and spans are
                center = ((cell[0] + cell[2]) / 2, (cell[1] + cell[3]) / 2)
                fill = next((color for box, color in reversed(fills) if _inside(center, box)), None)
                fill = _no_paper(fill, (255.0, 255.0, 255.0))
                counts: dict[str, int] = {}
                for box, color, chars in spans:
                    if _inside(((box[0] + box[2]) / 2, (box[1] + box[3]) / 2), cell):
                        counts[color] = counts.get(color, 0) + chars
                color = max(counts, key=counts.get) if counts else None
                cells.append({"row": r, "column": c, "text": _words_line(placed.get((r, c), [])),
                              "box": view.normalized(shown), "color": color, "color_name": color_name(color),
                              "fill": fill, "fill_name": color_name(fill)})
        table = _table(cells, bbox, method, view)
        if table is not None:
            tables.append(table)
    return tables


def _words_line(words: list[Word]) -> str:
    out, previous = [], None
    for word in words:
        if previous is not None:
            out.append(" " if word.line == previous else "\n")
        out.append(word.text)
        previous = word.line
    return "".join(out)


# -- scanned pages: clustering OCR boxes ------------------------------------------------------------
def _phrases(row: list[Word], height: float) -> list[list[Word]]:
    phrases: list[list[Word]] = []
    for word in row:
        if phrases and word.box[0] - phrases[-1][-1].box[2] < PHRASE_GAP * height:
            phrases[-1].append(word)
        else:
            phrases.append([word])
    return phrases


def _box(words: list[Word]) -> tuple[float, float, float, float]:
    return (min(w.box[0] for w in words), min(w.box[1] for w in words),
            max(w.box[2] for w in words), max(w.box[3] for w in words))


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
    words = [word for word, _ in _units(words)]
    if len(words) < 4:
        return []
    boxes = np.array([w.box for w in words], np.float32)
    height = float(np.median(boxes[:, 3] - boxes[:, 1]))
    rows = [[words[i] for i in row] for row in rows_of(boxes, np.arange(len(words)))]
    phrased = [_phrases(row, height) for row in rows]
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
        ranges = _column_ranges([_box(p) for row in table_rows if len(row) >= 2 for p in row],
                                sum(1 for row in table_rows if len(row) >= 2))
        if len(ranges) < 2:
            continue
        row_boxes = [_box([w for p in row for w in p]) for row in table_rows]
        cells = []
        for r, row in enumerate(table_rows):
            top = row_boxes[r][1] if r == 0 else (row_boxes[r - 1][3] + row_boxes[r][1]) / 2
            bottom = row_boxes[r][3] if r == len(table_rows) - 1 else (row_boxes[r][3] + row_boxes[r + 1][1]) / 2
            by_column: dict[int, list[Word]] = {}
            for phrase in row:
                center = (_box(phrase)[0] + _box(phrase)[2]) / 2
                column = min(range(len(ranges)), key=lambda c: 0 if ranges[c][0] <= center <= ranges[c][1]
                             else min(abs(center - ranges[c][0]), abs(center - ranges[c][1])))
                by_column.setdefault(column, []).extend(phrase)
            for c, (x0, x1) in enumerate(ranges):
                left = x0 if c == 0 else (ranges[c - 1][1] + x0) / 2
                right = x1 if c == len(ranges) - 1 else (x1 + ranges[c + 1][0]) / 2
                cell_box = (left, top, right, bottom)
                members = by_column.get(c, [])
                text_color, fill = _cell_colors(image, rect, cell_box, members)
                fill = _no_paper(fill, paper)
                cells.append({"row": r, "column": c, "text": " ".join(w.text for w in members),
                              "box": view.normalized(cell_box), "color": text_color, "color_name": color_name(text_color),
                              "fill": fill, "fill_name": color_name(fill)})
        table = _table(cells, (ranges[0][0], row_boxes[0][1], ranges[-1][1], row_boxes[-1][3]), "ocr-clusters", view)
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
    text = patch_colors(patch(_box(members)))[0] if members else None
    return text, fill
