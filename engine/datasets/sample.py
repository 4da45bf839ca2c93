"""`dossier sample`: a small, realistic PDF collection made by the project, with questions whose gold pages are known.

Six documents - two annual reports with financial tables (one year apart, for
cross-document questions), a membership form of label–value fields, a two-page café
menu, a two-page memo, and a scanned notice whose only page is an image (no text layer,
so ingest flags it for OCR) - and 20 questions in the canonical format, single-page,
cross-page and cross-document, each with `category`, `domain` and `hop_type`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.datasets.formats import Evidence, Question, write_jsonl

__all__ = ["write_sample_suite", "write_suite", "SAMPLE_DOCUMENTS"]

_FIXED_METADATA = {"producer": "Dossier sample suite", "creator": "dossier sample", "creationDate": "D:20260101000000Z",
                   "modDate": "D:20260101000000Z"}


def _page(doc, lines: list[tuple[str, float, str]] | None = None):
    """A new A4 page; `lines` are (text, font size, font name) written top-down."""
    page = doc.new_page(width=595, height=842)
    y = 72.0
    for text, size, font in lines or []:
        page.insert_text((60, y), text, fontsize=size, fontname=font)
        y += size * 1.6
    return page


def _table(page, top: float, rows: list[list[str]], widths: list[float], fills: dict[tuple[int, int], tuple] | None = None,
           text_colors: dict[tuple[int, int], tuple] | None = None):
    """Draw a ruled table; `fills` colours cells (row, col) -> RGB in 0..1, `text_colors` their text."""
    import pymupdf

    x0, height = 60.0, 20.0
    for r, row in enumerate(rows):
        x = x0
        for c, cell in enumerate(row):
            rect = pymupdf.Rect(x, top + r * height, x + widths[c], top + (r + 1) * height)
            fill = (fills or {}).get((r, c))
            page.draw_rect(rect, color=(0, 0, 0), fill=fill, width=0.6)
            font = "hebo" if r == 0 else "helv"
            page.insert_text((rect.x0 + 4, rect.y1 - 6), cell, fontsize=9.5, fontname=font,
                             color=(text_colors or {}).get((r, c), (0, 0, 0)))
            x += widths[c]


def _paragraph(page, top: float, text: str, size: float = 10.5) -> None:
    import pymupdf

    page.insert_textbox(pymupdf.Rect(60, top, 535, top + 400), text, fontsize=size, fontname="helv")


def _annual_report(path: Path, year: int, figures: dict[str, tuple[str, str]], ceo_note: str, outlook: str) -> None:
    import pymupdf

    doc = pymupdf.open()
    p1 = _page(doc, [(f"Northwind Cooperative - Annual Report {year}", 20, "hebo"),
                     ("Letter from the Chief Executive", 13, "hebo")])
    _paragraph(p1, 130, ceo_note)
    p2 = _page(doc, [("Financial Highlights", 16, "hebo"), ("(in thousands of US dollars)", 10, "helv")])
    rows = [["Metric", str(year), str(year - 1)]] + [[k, v[0], v[1]] for k, v in figures.items()]
    _table(p2, 120, rows, [220, 110, 110], fills={(3, 1): (1.0, 0.85, 0.85)})
    _paragraph(p2, 140 + 20 * len(rows), "Net income is shown after taxes. Capital expenditure covers the "
               "purchase of property, plant and equipment.")
    p3 = _page(doc, [("Segment Review", 16, "hebo")])
    _paragraph(p3, 100, f"Retail stores contributed most of the revenue in {year}. The wholesale segment grew "
               "with two new regional warehouses, and the online shop reached 41,000 active members.")
    p4 = _page(doc, [("Outlook and Risks", 16, "hebo")])
    _paragraph(p4, 100, outlook)
    doc.set_metadata({**_FIXED_METADATA, "title": f"Northwind Cooperative Annual Report {year}"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _form(path: Path) -> None:
    doc = __import__("pymupdf").open()
    page = _page(doc, [("Greenfield Library - Membership Application", 18, "hebo")])
    fields = [("Full name", "Amelia R. Okafor"), ("Member ID", "GL-20417"), ("Date of birth", "14 March 1987"),
              ("Address", "22 Orchard Lane, Millbrook"), ("Membership plan", "Family"),
              ("Monthly fee", "$12.50"), ("Signature date", "2 February 2024")]
    for i, (label, value) in enumerate(fields):
        y = 130 + i * 34
        page.insert_text((60, y), f"{label}:", fontsize=11, fontname="hebo")
        page.insert_text((200, y), value, fontsize=11, fontname="helv")
        page.draw_line((195, y + 4), (480, y + 4), width=0.5)
    doc.set_metadata({**_FIXED_METADATA, "title": "Membership application"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _menu(path: Path) -> None:
    doc = __import__("pymupdf").open()
    food = [("Harbor chowder", "$9.00"), ("Grilled halibut sandwich", "$16.50"), ("Spaghetti with clams", "$18.00"),
            ("Garden salad", "$8.25")]
    drinks = [("Espresso", "$3.00"), ("Cold brew", "$4.50"), ("Fresh lemonade", "$3.75"), ("Sea-salt hot chocolate", "$5.25")]
    for title, items in (("Harbor Cafe - Lunch Menu", food), ("Harbor Cafe - Drinks", drinks)):
        page = _page(doc, [(title, 18, "hebo")])
        for i, (name, price) in enumerate(items):
            y = 130 + i * 30
            page.insert_text((60, y), name, fontsize=12, fontname="helv")
            page.insert_text((420, y), price, fontsize=12, fontname="helv")
    doc.set_metadata({**_FIXED_METADATA, "title": "Harbor Cafe menu"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _memo(path: Path) -> None:
    doc = __import__("pymupdf").open()
    p1 = _page(doc, [("MEMORANDUM", 18, "hebo"), ("To: All warehouse staff", 11, "helv"),
                     ("From: Daniel Reyes, Operations Director", 11, "helv"), ("Date: 9 September 2024", 11, "helv"),
                     ("Subject: Relocation of the Eastgate warehouse", 11, "hebo")])
    _paragraph(p1, 200, "The Eastgate warehouse will move to the Riverside Logistics Park. Packing starts on "
               "4 November 2024. Staff parking at the new site is in lot C.")
    p2 = _page(doc, [("Relocation schedule (continued)", 14, "hebo")])
    _paragraph(p2, 100, "Operations resume at Riverside on 18 November 2024. Questions about shift changes go "
               "to the human resources desk, extension 4471.")
    doc.set_metadata({**_FIXED_METADATA, "title": "Relocation memo"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _scanned_notice(path: Path) -> None:
    """A page whose only content is an image of text (like a scan): no text layer at all."""
    import pymupdf

    source = pymupdf.open()
    page = _page(source, [("PUBLIC NOTICE", 22, "hebo"), ("Millbrook Water Authority", 14, "helv"), ("", 12, "helv"),
                          ("Scheduled maintenance will interrupt water service", 12, "helv"),
                          ("on Harbor Street on 21 October 2024", 12, "helv"),
                          ("between 8 am and 3 pm.", 12, "helv")])
    png = page.get_pixmap(dpi=150).tobytes("png")
    doc = pymupdf.open()
    scan = doc.new_page(width=595, height=842)
    scan.insert_image(scan.rect, stream=png)
    doc.set_metadata({**_FIXED_METADATA, "title": "Scanned notice"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


SAMPLE_DOCUMENTS = ("northwind-annual-report-2023", "northwind-annual-report-2022", "library-membership-form",
                    "harbor-cafe-menu", "warehouse-relocation-memo", "water-authority-notice")


def _questions() -> list[Question]:
    r23, r22, form, menu, memo, notice = SAMPLE_DOCUMENTS

    def q(qid, text, answers, evidence, category, hop):
        return Question(qid, text, answers, [Evidence(d, p) for d, p in evidence],
                        {"category": category, "domain": {"report": "financial"}.get(category, category), "hop_type": hop})

    return [
        q("s01", "What was Northwind Cooperative's revenue in 2023 (in thousands of US dollars)?",
          [["$48,250"], ["48,250"], ["48250"]], [(r23, 2)], "report", "single"),
        q("s02", "What was Northwind Cooperative's net income in 2022 according to the 2023 annual report?",
          [["$3,905"], ["3,905"]], [(r23, 2)], "report", "single"),
        q("s03", "How much did Northwind spend on capital expenditure in 2023?", [["$2,740"], ["2,740"]],
          [(r23, 2)], "report", "single"),
        q("s04", "How many active members did Northwind's online shop reach in 2023?", [["41,000"]], [(r23, 3)],
          "report", "single"),
        q("s05", "Which segment contributed most of Northwind's revenue in 2023?", [["Retail stores"], ["Retail"]],
          [(r23, 3)], "report", "single"),
        q("s06", "Who signed the letter from the Chief Executive in the 2023 annual report?", [["Helen Marsh"]],
          [(r23, 1)], "report", "single"),
        q("s07", "What was Northwind's operating income in 2021?", [["$5,120"], ["5,120"]], [(r22, 2)], "report", "single"),
        q("s08", "By how much did Northwind's revenue grow from 2021 to 2023, in thousands of US dollars?",
          [["6,150"], ["$6,150"]], [(r23, 2), (r22, 2)], "report", "cross-document"),
        q("s09", "Which risk did the 2022 annual report name as the main one for the next year?",
          [["Fuel prices"], ["rising fuel prices"]], [(r22, 4)], "report", "single"),
        q("s10", "What is the member ID on the Greenfield Library membership application?", [["GL-20417"]],
          [(form, 1)], "form", "single"),
        q("s11", "Which membership plan did Amelia R. Okafor choose?", [["Family"]], [(form, 1)], "form", "single"),
        q("s12", "What monthly fee is stated on the library membership form?", [["$12.50"], ["12.50"]], [(form, 1)],
          "form", "single"),
        q("s13", "How much does the spaghetti with clams cost at Harbor Cafe?", [["$18.00"], ["$18"]], [(menu, 1)],
          "menu", "single"),
        q("s14", "What is the price of a cold brew at Harbor Cafe?", [["$4.50"]], [(menu, 2)], "menu", "single"),
        q("s15", "Which is more expensive at Harbor Cafe: the harbor chowder or the sea-salt hot chocolate?",
          [["Harbor chowder"], ["The harbor chowder"]], [(menu, 1), (menu, 2)], "menu", "cross-page"),
        q("s16", "Where will the Eastgate warehouse move to?", [["Riverside Logistics Park"]], [(memo, 1)],
          "memo", "single"),
        q("s17", "On what date do operations resume at the new warehouse site?", [["18 November 2024"]],
          [(memo, 2)], "memo", "single"),
        q("s18", "How many days pass between the start of packing and the resumption of operations in the relocation memo?",
          [["14"], ["14 days"]], [(memo, 1), (memo, 2)], "memo", "cross-page"),
        q("s19", "On which street will water service be interrupted for maintenance?", [["Harbor Street"]],
          [(notice, 1)], "notice", "single"),
        q("s20", "Who sent the memo about the warehouse relocation?", [["Daniel Reyes"]], [(memo, 1)], "memo", "single"),
    ]


def write_suite(out: str | Path, write_pdfs: Callable[[Path], None], documents: list[str],
                questions: list[Question]) -> dict:
    """Write a suite: its PDFs (`write_pdfs(OUT/pdfs)`, one `<document>.pdf` each) and OUT/questions.jsonl.

    Returns:
        {"pdfs": folder, "questions": file, "documents": count, "pages": count, "question_count": count}
    """
    import pymupdf

    out = Path(out)
    pdfs = out / "pdfs"
    pdfs.mkdir(parents=True, exist_ok=True)
    write_pdfs(pdfs)
    write_jsonl(out / "questions.jsonl", questions)
    pages = sum(pymupdf.open(pdfs / f"{name}.pdf").page_count for name in documents)
    return {"pdfs": str(pdfs), "questions": str(out / "questions.jsonl"), "documents": len(documents),
            "pages": pages, "question_count": len(questions)}


def write_sample_suite(out: str | Path) -> dict:
    """Write the sample PDFs to OUT/pdfs and the questions to OUT/questions.jsonl (see `write_suite`)."""
    return write_suite(out, _sample_pdfs, list(SAMPLE_DOCUMENTS), _questions())


def _sample_pdfs(pdfs: Path) -> None:
    r23, r22, form, menu, memo, notice = SAMPLE_DOCUMENTS
    _annual_report(pdfs / f"{r23}.pdf", 2023,
                   {"Revenue": ("$48,250", "$45,610"), "Operating income": ("$6,480", "$5,870"),
                    "Net income": ("$4,310", "$3,905"), "Capital expenditure": ("$2,740", "$2,115")},
                   "Dear members, 2023 was a year of steady growth for our cooperative. We opened two regional "
                   "warehouses and kept prices stable for our members.\n\nHelen Marsh, Chief Executive",
                   "We expect moderate growth in 2024. The main risk remains the cost of electricity for our cold "
                   "storage, which we hedge through a five-year supply contract.")
    _annual_report(pdfs / f"{r22}.pdf", 2022,
                   {"Revenue": ("$45,610", "$42,100"), "Operating income": ("$5,870", "$5,120"),
                    "Net income": ("$3,905", "$3,480"), "Capital expenditure": ("$2,115", "$1,960")},
                   "Dear members, 2022 tested our supply chains, yet revenue rose for the fifth year in a row.\n\n"
                   "Helen Marsh, Chief Executive",
                   "For 2023 the main risk we see is rising fuel prices, which affect our delivery fleet.")
    _form(pdfs / f"{form}.pdf")
    _menu(pdfs / f"{menu}.pdf")
    _memo(pdfs / f"{memo}.pdf")
    _scanned_notice(pdfs / f"{notice}.pdf")
