"""Tables on text-layer pages: PyMuPDF's table finder for the grid, the text layer for the text.

`page.find_tables` is run with three strategies (ruling lines; horizontal rules with columns
from text alignment, as in financial statements; text alignment alone) and the one whose
tables hold the most words in rows of two or more filled single-line cells wins. Each
cell's text is made of the text-layer words placed in it (PyMuPDF's own `extract()` glues
characters without spaces on many PDFs), its text colour comes from the text spans, and its
fill is the topmost filled rectangle under its centre (`page.get_drawings()`, drawing order
= paint order).
"""

from __future__ import annotations

import numpy as np

from tools.perception.cells import PHRASE_GAP, inside, make_table, no_paper, units_of, words_line
from tools.perception.colors import color_name, hex_color
from tools.perception.page import PageView, Word

__all__ = ["pdf_tables", "STRATEGIES"]

# PyMuPDF find_tables strategies, all tried: ruled grids; rules across with columns from text
# alignment (financial statements); text alignment alone. `use_layout=False` always: Dossier keeps
# PyMuPDF's ONNX layout analyser unloaded (tools/__init__.py), and results must not depend on
# import order.
STRATEGIES = (
    ("lines", {"strategy": "lines"}),
    ("rules+text", {"horizontal_strategy": "lines", "vertical_strategy": "text"}),
    ("text", {"strategy": "text"}),
)
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
            hit = next((c for c, cell in enumerate(row) if cell is not None and inside(point, cell)), None)
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


def pdf_tables(view: PageView, rect) -> list[dict]:
    """Tables in a region (displayed-page points) of a text-layer page."""
    import pymupdf

    pymupdf.no_recommend_layout()  # find_tables would print an install hint on stdout (breaks JSON output)
    units = units_of(view.words())
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
                fill = next((color for box, color in reversed(fills) if inside(center, box)), None)
                fill = no_paper(fill, (255.0, 255.0, 255.0))
                counts: dict[str, int] = {}
                for box, color, chars in spans:
                    if inside(((box[0] + box[2]) / 2, (box[1] + box[3]) / 2), cell):
                        counts[color] = counts.get(color, 0) + chars
                color = max(counts, key=counts.get) if counts else None
                cells.append({"row": r, "column": c, "text": words_line(placed.get((r, c), [])),
                              "box": view.normalized(shown), "color": color, "color_name": color_name(color),
                              "fill": fill, "fill_name": color_name(fill)})
        table = make_table(cells, bbox, method, view)
        if table is not None:
            tables.append(table)
    return tables
