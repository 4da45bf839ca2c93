"""Markdown tables for reports and cards: one writer, so every table escapes its cells the same way.

A cell holding `|` (an answer like "A | B", a query with OR written as a pipe) would otherwise split into
two cells and shift the whole row; a newline would end the row. `markdown_table` escapes the first as
`\\|` and turns the second into a space, so a row always has as many cells as the header.

A leaf module (no imports of ours): the evaluation reports, the training card and the scripts may use it.

    >>> markdown_table(["system", "answer"], [["bm25", "A | B"]])
    ['| system | answer |', '|---|---|', '| bm25 | A \\\\| B |']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["markdown_cell", "markdown_table"]


def markdown_cell(value: object) -> str:
    """One cell's text: `str(value)` with `|` escaped and line breaks turned into spaces."""
    text = str(value).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return text.replace("|", "\\|")


def markdown_table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> list[str]:
    """A GitHub-flavoured Markdown table as lines: header, `|---|` rule, one line per row.

    Args:
        header: column titles.
        rows: cells per row (any value; `str()` is applied); each row should have len(header) cells.

    Returns:
        The lines, without a trailing blank line (add `""` where the document needs one).
    """
    lines = ["| " + " | ".join(markdown_cell(title) for title in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows]
    return lines
