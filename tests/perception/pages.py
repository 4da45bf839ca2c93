"""Synthetic pages with known content for the perception tools: a coloured table, a small label,
text along a diagonal, a printed form, and a scan (image only) of the table page."""

from __future__ import annotations

import io
from pathlib import Path

RED = (0.85, 0.0, 0.0)
LIGHT_BLUE = (0.8, 0.9, 1.0)
YELLOW = (1.0, 0.93, 0.2)
COLUMNS = (60, 220, 330, 440)  # cell x edges in points
TOP, ROW = 100, 28  # first row's top and row height in points
TABLE = [  # (text, text colour, fill) per cell
    [("Item", None, LIGHT_BLUE), ("2023", None, LIGHT_BLUE), ("2022", None, LIGHT_BLUE)],
    [("Revenue", None, None), ("48,250", None, None), ("44,100", None, None)],
    [("Net income", None, None), ("5,310", RED, None), ("4,870", None, None)],
    [("Operating margin", None, None), ("11.0%", None, YELLOW), ("10.4%", None, None)],
]
DIAGONAL = ["North", "Quay", "Ferry", "Route"]  # placed along the line from (0.15, 0.55) to (0.75, 0.85)
WIDTH, HEIGHT = 595, 842


def _table_page(doc):
    import pymupdf

    page = doc.new_page(width=WIDTH, height=HEIGHT)
    page.insert_text((60, 70), "Financial highlights", fontsize=16, fontname="hebo")
    for r, row in enumerate(TABLE):
        y0 = TOP + r * ROW
        for c, (text, color, fill) in enumerate(row):
            rect = pymupdf.Rect(COLUMNS[c], y0, COLUMNS[c + 1] if c + 1 < len(COLUMNS) else 550, y0 + ROW)
            if fill:
                page.draw_rect(rect, color=None, fill=fill, width=0)
            page.insert_text((rect.x0 + 6, y0 + 19), text, fontsize=12, fontname="helv", color=color or (0, 0, 0))
        page.draw_line((60, y0), (550, y0), color=(0, 0, 0), width=0.8)
    page.draw_line((60, TOP + len(TABLE) * ROW), (550, TOP + len(TABLE) * ROW), color=(0, 0, 0), width=0.8)
    page.insert_text((60, 300), "Figures in thousands of US dollars; audited.", fontsize=10)
    return page


def _label_and_diagonal_page(doc):
    import math

    import pymupdf

    page = doc.new_page(width=WIDTH, height=HEIGHT)
    page.insert_text((60, 80), "Site plan", fontsize=16, fontname="hebo")
    page.insert_text((480, 800), "Ref. QX-17", fontsize=4.5)  # a small label in the bottom-right corner
    x0, y0, x1, y1 = 0.15 * WIDTH, 0.55 * HEIGHT, 0.75 * WIDTH, 0.85 * HEIGHT
    angle = math.atan2(y1 - y0, x1 - x0)
    for i, word in enumerate(DIAGONAL):
        t = (i + 0.3) / len(DIAGONAL)
        point = pymupdf.Point(x0 + t * (x1 - x0), y0 + t * (y1 - y0))
        page.insert_text(point, word, fontsize=11, morph=(point, pymupdf.Matrix(math.degrees(angle))))
    for text, (x, y) in (("Warehouse", (380, 420)), ("Parking", (90, 760)), ("Gate", (420, 560))):
        page.insert_text((x, y), text, fontsize=11)  # distractors off the line
    return page


def _form_page(doc):
    page = doc.new_page(width=WIDTH, height=HEIGHT)
    page.insert_text((60, 80), "Membership Application", fontsize=16, fontname="hebo")
    for i, (label, value) in enumerate((("Full name", "Amelia R. Okafor"), ("Member ID", "GL-20417"),
                                        ("Monthly fee", "$12.50"))):
        y = 130 + 34 * i
        page.insert_text((60, y), f"{label}:", fontsize=11, fontname="hebo")
        page.insert_text((200, y), value, fontsize=11)
        page.draw_line((195, y + 4), (480, y + 4), width=0.5)
    page.insert_text((60, 260), "Date: 2 February 2024", fontsize=11)
    return page


def make_documents(folder: Path) -> Path:
    """Write report.pdf (table, label + diagonal, form) and scan.pdf (an image of the table page)."""
    import pymupdf

    folder.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()
    _table_page(doc)
    _label_and_diagonal_page(doc)
    _form_page(doc)
    png = doc[0].get_pixmap(dpi=200).tobytes("png")
    doc.save(folder / "report.pdf")
    doc.close()
    scan = pymupdf.open()
    page = scan.new_page(width=WIDTH, height=HEIGHT)
    page.insert_image(page.rect, stream=io.BytesIO(png).getvalue())
    scan.save(folder / "scan.pdf")
    scan.close()
    return folder


def table_region() -> list[float]:
    """The table's area (with a margin) as fractions of the page."""
    return [50 / WIDTH, (TOP - 8) / HEIGHT, 560 / WIDTH, (TOP + len(TABLE) * ROW + 8) / HEIGHT]
