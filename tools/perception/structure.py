"""Structure recovery: tables (cells with row, column, text, colours), label–value pairs of forms, and the
layout: blocks in reading order with their roles, headings with levels, and the sections they open
(`hierarchy.py`, over the reading order of `tools/ocr/layout.py`)."""

from __future__ import annotations

import numpy as np

from tools.errors import DossierError
from tools.perception.context import PerceptionContext
from tools.perception.forms import form_fields, printed_pairs
from tools.perception.hierarchy import page_layout
from tools.perception.observation import Observation, parse_region
from tools.perception.tables_ocr import ocr_tables
from tools.perception.tables_pdf import pdf_tables

__all__ = ["structure_recovery", "KINDS"]

KINDS = ("all", "tables", "forms", "layout")


def structure_recovery(ctx: PerceptionContext, document: str, page: int, region=None, kind: str = "all") -> Observation:
    """Recover tables, form fields and/or the layout of a page or region.

    Args:
        region: [l, t, r, b] fractions of the page; None = the whole page.
        kind: 'tables', 'forms', 'layout' or 'all' (all three).

    Returns:
        content = {"source": 'pdf' | 'ocr:<backend>', "tables": [{"method", "box", "rows", "columns",
        "cells": [{"row", "column", "text", "box", "color", "color_name", "fill", "fill_name"}]}],
        "fields": [{"label", "value", ...}]}; rows and columns count from 0; boxes are fractions of
        the page; "fill" is None where a cell has no fill (paper shows through); and "layout":
        {"blocks", "headings", "sections", "columns"} as `hierarchy.page_layout` describes.
    """
    if kind not in KINDS:
        raise DossierError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    box = parse_region(region)
    view = ctx.view(document, page)
    rect = view.rect(box)
    words, origin = ctx.region_words(view, rect)
    content: dict = {"source": origin}
    if kind in ("all", "tables"):
        if origin == "pdf":
            content["tables"] = pdf_tables(view, rect)
        else:
            image = np.asarray(view.render(rect, ctx.settings.color_zoom))
            content["tables"] = ocr_tables(view, rect, words, image)
    if kind in ("all", "forms"):
        fields = form_fields(view, rect) if origin == "pdf" else []
        content["fields"] = fields + printed_pairs(view, words)
    if kind in ("all", "layout"):
        content["layout"] = page_layout(view, words)
    return Observation("structure_recovery", document, page, list(box), content)
