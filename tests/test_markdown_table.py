"""tools/markdown.py: one Markdown table writer whose rows keep their cell count whatever the cells hold."""

import re

from tools.markdown import markdown_table

UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    """The cells a Markdown renderer sees: split on pipes not preceded by a backslash."""
    return [cell.strip() for cell in UNESCAPED_PIPE.split(line)[1:-1]]


def test_a_pipe_or_a_newline_in_a_cell_keeps_the_row_its_width():
    header = ["system", "answer | gold", "n"]
    rows = [["bm25", "A | B", 3], ["qguide", "line one\nline two", 4], ["direct", "", None]]
    lines = markdown_table(header, rows)
    assert lines[1] == "|---|---|---|"
    assert [len(_cells(line)) for line in lines] == [3, 3, 3, 3, 3]
    assert _cells(lines[0])[1] == "answer \\| gold"
    assert _cells(lines[2]) == ["bm25", "A \\| B", "3"]
    assert _cells(lines[3])[1] == "line one line two"
    assert _cells(lines[4]) == ["direct", "", "None"]


def test_plain_cells_render_as_the_reports_always_did():
    # the evaluation reports' tables (engine/eval/reports) must stay byte-identical when they switch to this helper
    assert markdown_table(["σ", "ρ"], [["high", "91.0%"]]) == ["| σ | ρ |", "|---|---|", "| high | 91.0% |"]
