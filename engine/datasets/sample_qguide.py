"""`dossier sample --suite qguide`: documents made of the failure cases Q-Guide names, DocVQA-2026-style questions.

Q-Guide (Section 1, 3.3) lists what a single fast pass misreads: a value printed in red,
tiny labels, table cells and highlighted rows, dimensions on a drawing, text set at an angle
or along a route. Four documents hold exactly those, drawn with PyMuPDF (byte-identical on
every run):

    lab-poster          a science poster: results table with one red value, a 5 pt figure caption
    bracket-drawing     an engineering drawing: 4.5 pt dimensions, the height written vertically, a title block
    harbor-quarterly    an 8-page business report (long enough to be split into chunks): a highlighted
                        table row, a rotated margin note, a red figure on the last page
    tram-map            a map: station names along a diagonal line (a route to follow)

Each question names its document in `document` (DocVQA-2026 style: the agent reads that
document, no retrieval) and carries its gold pages, so Page F1 and the error taxonomy work.
One question has no answer in its document; its gold answer is "Unknown", the competition's
rule for unanswerable questions.
"""

from __future__ import annotations

import math
from pathlib import Path

from engine.datasets.formats import Evidence, Question
from engine.datasets.sample import _FIXED_METADATA, _page, _paragraph, _table, write_suite

__all__ = ["write_qguide_suite", "QGUIDE_DOCUMENTS"]

RED = (0.85, 0.0, 0.0)
QGUIDE_DOCUMENTS = ("lab-poster", "bracket-drawing", "harbor-quarterly", "tram-map")


def _save(doc, path: Path, title: str) -> None:
    doc.set_metadata({**_FIXED_METADATA, "title": title})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _poster(path: Path) -> None:
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=842, height=595)  # landscape A4
    page.insert_text((40, 50), "Low-Temperature Hydrogenation with Supported Nickel Catalysts", fontsize=20, fontname="hebo")
    page.insert_text((40, 72), "R. Almeida, K. Osei, T. Lindqvist - Institute for Applied Catalysis", fontsize=10)
    _paragraph(page, 95, "We compare four supported nickel catalysts at 80 C and 10 bar. Yields are isolated "
               "yields after 6 h, mean of three runs.", size=9)
    rows = [["Catalyst", "Support", "Yield", "Selectivity"], ["Catalyst A", "Alumina", "61.2%", "0.91"],
            ["Catalyst B", "Silica", "72.8%", "0.88"], ["Catalyst C", "Titania", "87.5%", "0.95"],
            ["Catalyst D", "Zeolite", "58.9%", "0.83"]]
    _table(page, 150, rows, [110, 90, 70, 80], text_colors={(3, 2): RED})
    page.insert_text((40, 270), "Table 1. Values in red exceed the 85% target.", fontsize=5)
    page.draw_rect(pymupdf.Rect(480, 140, 800, 380), color=(0.2, 0.2, 0.2), width=0.8)
    for i, height in enumerate((120, 150, 200, 110)):  # a bar chart of the yields
        x = 510 + i * 70
        page.draw_rect(pymupdf.Rect(x, 360 - height, x + 40, 360), color=None, fill=(0.3, 0.45, 0.7))
        page.insert_text((x + 8, 374), "ABCD"[i], fontsize=8)
    page.insert_text((480, 392), "Figure 2. Yield by catalyst; n = 240 runs in total.", fontsize=5)
    page.insert_text((40, 560), "Contact: catalysis-lab@example.org", fontsize=7)
    _save(doc, path, "Hydrogenation poster")


def _drawing(path: Path) -> None:
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=842, height=595)
    outline = [(200, 120), (360, 120), (360, 400), (520, 400), (520, 460), (200, 460), (200, 120)]
    page.draw_polyline(outline, color=(0, 0, 0), width=1.2)
    page.draw_circle((280, 200), 18, color=(0, 0, 0), width=1)
    page.draw_line((170, 120), (170, 460), color=(0, 0, 0), width=0.4)  # height dimension line
    page.insert_text((162, 320), "HEIGHT 120 mm", fontsize=4.5, rotate=90)
    page.draw_line((200, 490), (520, 490), color=(0, 0, 0), width=0.4)
    page.insert_text((330, 500), "WIDTH 160 mm", fontsize=4.5)
    page.insert_text((305, 182), "HOLE DIA 8.5 mm", fontsize=4.5)
    page.insert_text((530, 436), "FLANGE 20 mm", fontsize=4.5)
    block = pymupdf.Rect(600, 470, 820, 575)
    page.draw_rect(block, color=(0, 0, 0), width=0.8)
    for i, line in enumerate(("PART: MOUNTING BRACKET MB-7", "MATERIAL: AISI 304 STAINLESS", "SCALE 1:2",
                              "DRAWN: J. PARK  REV C")):
        page.insert_text((608, 488 + i * 20), line, fontsize=5)
    page.insert_text((40, 40), "Mounting bracket MB-7 - general arrangement", fontsize=14, fontname="hebo")
    _save(doc, path, "Bracket drawing")


def _quarterly(path: Path) -> None:
    import pymupdf

    doc = pymupdf.open()
    p1 = _page(doc, [("Harbor Freight Lines - Quarterly Report Q3 2024", 18, "hebo"), ("Contents", 13, "hebo")])
    _paragraph(p1, 130, "1 Highlights  2 Fleet  3 Safety  4 Regional sales  5 Costs  6 Quarterly table  "
               "7 Restatements  8 Outlook")
    sections = {
        2: ("Fleet", "The fleet grew to 46 vessels. Two older feeders were retired and three new coastal "
                     "carriers entered service in July."),
        3: ("Safety", "Lost-time incidents fell to 3 in the quarter. All crews completed the revised "
                      "winter-navigation course."),
        4: ("Regional sales", "Sales by region are shown in thousands of US dollars. The highlighted row "
                              "marks the region that missed its target by the widest margin."),
        5: ("Costs", "Fuel remained the largest cost. Port fees rose 4% after the new harbour tariff."),
        6: ("Quarterly table", "Quarterly sales (thousands of US dollars)"),
        7: ("Restatements", "Figures for earlier quarters are final unless noted in the margin."),
        8: ("Outlook", "We expect demand to stay firm into the winter season. Capital spending next year is "
                       "budgeted at"),
    }
    for number, (title, text) in sections.items():
        page = _page(doc, [(f"{number}. {title}", 15, "hebo")])
        _paragraph(page, 100, text)
        page.insert_text((520, 820), f"page {number}", fontsize=6)
        if number == 4:
            rows = [["Region", "Target", "Actual"], ["North", "410", "352"], ["South", "380", "395"],
                    ["East", "300", "318"], ["West", "250", "199"]]
            _table(page, 160, rows, [160, 100, 100], fills={(1, c): (1.0, 0.93, 0.55) for c in range(3)})
        if number == 6:
            rows = [["Quarter", "Sales", "Change"], ["Q1", "1,105", "+2%"], ["Q2", "1,190", "+8%"],
                    ["Q3", "1,284", "+8%"]]
            _table(page, 110, rows, [120, 100, 100])
        if number == 7:
            page.insert_text((560, 700), "Note: Q2 sales restated after audit", fontsize=7, rotate=90)
        if number == 8:
            page.insert_text((60, 150), "$2.4 million", fontsize=10, color=RED)
            page.insert_text((60, 170), "subject to board approval in December.", fontsize=10)
    _save(doc, path, "Quarterly report Q3 2024")


def _map(path: Path) -> None:
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((40, 50), "Northbank tram network (Line 3)", fontsize=16, fontname="hebo")
    start, end = (80.0, 720.0), (520.0, 180.0)
    page.draw_line(start, end, color=RED, width=3)
    angle = math.degrees(math.atan2(start[1] - end[1], end[0] - start[0]))  # the line rises to the right
    stations = ("Harbour Gate", "Elm Park", "Mill Cross", "Quarry Road", "Summit")
    for i, name in enumerate(stations):
        t = (i + 0.5) / len(stations)
        x, y = start[0] + t * (end[0] - start[0]), start[1] + t * (end[1] - start[1])
        page.draw_circle((x, y), 5, color=(0, 0, 0), fill=(1, 1, 1), width=1)
        # the label sits along the line, set at the line's angle
        morph = (pymupdf.Point(x + 8, y - 6), pymupdf.Matrix(angle))
        page.insert_text((x + 8, y - 6), name, fontsize=7, morph=morph)
    page.insert_text((40, 800), "Trams every 8 minutes, 6:00 to 23:30.", fontsize=6)
    _save(doc, path, "Tram map")


def _questions() -> list[Question]:
    poster, drawing, report, tram = QGUIDE_DOCUMENTS
    categories = {poster: "science_poster", drawing: "engineering_drawing", report: "business_report", tram: "maps"}

    def q(qid, document, text, answers, pages, hop="single"):
        category = categories[document]
        extra = {"document": document, "document_category": category, "category": category, "domain": category,
                 "hop_type": hop}
        return Question(qid, text, answers, [Evidence(document, p) for p in pages], extra)

    return [
        q("qg01", poster, "Which catalyst's yield is printed in red in the results table?", [["Catalyst C"], ["C"]], [1]),
        q("qg02", poster, "What is the yield value printed in red?", [["87.5%"]], [1]),
        q("qg03", poster, "According to the small caption of Figure 2, how many runs were made in total?",
          [["240"], ["240 runs"]], [1]),
        q("qg04", drawing, "What is the height of the bracket, written vertically beside the drawing?",
          [["120 mm"]], [1]),
        q("qg05", drawing, "Which material does the title block specify?", [["AISI 304 stainless"], ["AISI 304"]], [1]),
        q("qg06", drawing, "What is the diameter of the mounting hole?", [["8.5 mm"]], [1]),
        q("qg07", report, "Which region is highlighted in the regional sales table?", [["North"]], [4]),
        q("qg08", report, "What were the sales in Q3, in thousands of US dollars?", [["1284"], ["1,284"]], [6]),
        q("qg09", report, "Which quarter's sales does the rotated margin note say were restated?", [["Q2"]], [7]),
        q("qg10", report, "What capital spending is budgeted for next year (the figure printed in red)?",
          [["$2.4 million"], ["2.4 million"]], [8]),
        q("qg11", report, "By how much did actual sales in the highlighted region fall short of target, "
                          "in thousands of US dollars?", [["58"]], [4]),
        q("qg12", tram, "Which station lies between Elm Park and Quarry Road on Line 3?", [["Mill Cross"]], [1]),
        q("qg13", poster, "What is the telephone number of the catalysis lab?", [["Unknown"]], [1]),
    ]


def write_qguide_suite(out: str | Path) -> dict:
    """Write the Q-Guide sample PDFs to OUT/pdfs and its questions to OUT/questions.jsonl (see `write_suite`)."""
    return write_suite(out, _qguide_pdfs, list(QGUIDE_DOCUMENTS), _questions())


def _qguide_pdfs(pdfs: Path) -> None:
    for name, make in zip(QGUIDE_DOCUMENTS, (_poster, _drawing, _quarterly, _map)):
        make(pdfs / f"{name}.pdf")
