"""`dossier sample --suite mudabench`: analytical questions over a small collection with document metadata.

Ten documents made by the project: annual reports of four invented companies for 2022 and
2023 (a financial-highlights table on page 2, stated in thousands or in millions of US
dollars) and two sustainability reports that mention similar words but are not annual
reports, so a metadata filter on the report type matters. Beside the PDFs, metadata.jsonl
gives each document's company, sector, year and report type (`dossier ingest --metadata`).

Ten MuDABench-style questions need one fact from each of several documents, combined by
arithmetic (an average, a sum, a growth rate, a range, a count, an arg-max). Each question
keeps MuDABench's shape as the importer writes it: `metadata` holds the gold rows, one per
document, with the fact as `value_<name>` in US dollar millions (or a count); the final
answer is computed here from the same table the PDFs print, so gold and documents agree.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from engine.datasets.formats import Evidence, Question, write_jsonl
from engine.datasets.sample import _FIXED_METADATA, _page, _paragraph, _table

__all__ = ["write_mudabench_sample", "COMPANIES", "FIGURES"]

# company -> (sector, table scale, short description)
COMPANIES = {
    "Alder Robotics": ("robotics", "thousands", "warehouse robots and the software that plans their routes"),
    "Birch Foods": ("food", "millions", "frozen meals and bakery products sold through grocery chains"),
    "Cedar Energy": ("energy", "thousands", "rooftop solar installations and battery storage for farms"),
    "Dune Semiconductors": ("semiconductors", "millions", "power-management chips for electric bicycles"),
}
# (company, year) -> revenue, research and development, net income (US dollar millions), employees
FIGURES = {
    ("Alder Robotics", 2022): ("84.25", "12.64", "6.18", 640),
    ("Alder Robotics", 2023): ("97.3", "15.91", "8.02", 712),
    ("Birch Foods", 2022): ("212.4", "3.1", "14.9", 2310),
    ("Birch Foods", 2023): ("225.8", "3.6", "17.2", 2405),
    ("Cedar Energy", 2022): ("143.9", "5.27", "21.46", 880),
    ("Cedar Energy", 2023): ("131.5", "5.84", "15.73", 905),
    ("Dune Semiconductors", 2022): ("58.6", "17.9", "-2.4", 410),
    ("Dune Semiconductors", 2023): ("71.3", "21.2", "3.8", 468),
}
_FIELDS = ("revenue", "research_and_development", "net_income", "employees")
_LABELS = {"revenue": "Revenue", "research_and_development": "Research and development expense",
           "net_income": "Net income (loss)", "employees": "Employees at year end"}


def doc_id(company: str, year: int, kind: str = "annual-report") -> str:
    return f"{company.split()[0].lower()}-{kind}-{year}"


def _money(millions: str, scale: str) -> str:
    """A table cell as the report prints it: thousands without decimals, millions with one or two."""
    value = Decimal(millions) * (1000 if scale == "thousands" else 1)
    text = f"{abs(value):,.0f}" if scale == "thousands" else f"{abs(value):,}"
    return f"({text})" if value < 0 else text


def _annual_report(path: Path, company: str, year: int) -> None:
    import pymupdf

    sector, scale, business = COMPANIES[company]
    current, previous = FIGURES[(company, year)], FIGURES.get((company, year - 1))
    doc = pymupdf.open()
    p1 = _page(doc, [(f"{company} - Annual Report {year}", 20, "hebo"), ("To our shareholders", 13, "hebo")])
    _paragraph(p1, 130, f"{company} makes {business}. This report covers the financial year ended "
               f"31 December {year}. Our teams kept their focus on quality and on the customers who "
               f"rely on us every day.\n\nThe board of directors")
    p2 = _page(doc, [("Financial Highlights", 16, "hebo"), (f"(in {scale} of US dollars, except employees)", 10, "helv")])
    header = ["", str(year)] + ([str(year - 1)] if previous else [])
    rows = [header]
    for i, field in enumerate(_FIELDS):
        cells = [current[i], previous[i] if previous else None]
        shown = [f"{c:,}" if field == "employees" else _money(c, scale) for c in cells if c is not None]
        rows.append([_LABELS[field], *shown])
    _table(p2, 120, rows, [230, 110, 110][: len(header)])
    _paragraph(p2, 150 + 20 * len(rows), "Figures in parentheses are losses. Research and development expense "
               "is included in operating expenses.")
    p3 = _page(doc, [("Outlook", 16, "hebo")])
    _paragraph(p3, 100, f"In {year + 1} {company} expects demand in the {sector} market to stay firm. "
               "The main risks are input costs and the timing of large orders.")
    doc.set_metadata({**_FIXED_METADATA, "title": f"{company} Annual Report {year}"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _sustainability_report(path: Path, company: str, year: int, lines: str) -> None:
    import pymupdf

    doc = pymupdf.open()
    page = _page(doc, [(f"{company} - Sustainability Report {year}", 20, "hebo")])
    _paragraph(page, 110, lines)
    doc.set_metadata({**_FIXED_METADATA, "title": f"{company} Sustainability Report {year}"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _value(company: str, year: int, field: str) -> Decimal:
    return Decimal(str(FIGURES[(company, year)][_FIELDS.index(field)]))


def _show(value: Decimal) -> str:
    """A gold number: exact, without float noise (the MuDABench tolerance reads integer digits + one decimal)."""
    return f"{value.quantize(Decimal('0.0001')).normalize():f}"


def _rows(field: str, pairs: list[tuple[str, int]]) -> list[dict]:
    unit = "count" if field == "employees" else "usd_million"
    return [{"id": doc_id(c, y), "company": c, "sector": COMPANIES[c][0], "year": y,
             "report_type": "annual report", f"value_{field}_{unit}": float(_value(c, y, field)),
             "schema": {f"value_{field}_{unit}": _LABELS[field] + (" (US dollar millions)" if unit != "count" else "")}}
            for c, y in pairs]


def _questions() -> list[Question]:
    every = list(COMPANIES)
    growth = {c: (_value(c, 2023, "revenue") - _value(c, 2022, "revenue")) / _value(c, 2022, "revenue") * 100
              for c in every}
    specs = [
        ("m01", "What was the average revenue of the four companies in 2023, in millions of US dollars?",
         "revenue", [(c, 2023) for c in every],
         _show(sum(_value(c, 2023, "revenue") for c in every) / 4)),
        ("m02", "Which company had the highest net income in 2022?", "net_income", [(c, 2022) for c in every],
         max(every, key=lambda c: _value(c, 2022, "net_income"))),
        ("m03", "What was the total research and development expense of the four companies in 2023, "
                "in millions of US dollars?", "research_and_development", [(c, 2023) for c in every],
         _show(sum(_value(c, 2023, "research_and_development") for c in every))),
        ("m04", "What was the average revenue growth of the four companies from 2022 to 2023, in percent?",
         "revenue", [(c, y) for c in every for y in (2022, 2023)], _show(sum(growth.values()) / 4)),
        ("m05", "How many of the four companies had more than 700 employees at the end of 2023?", "employees",
         [(c, 2023) for c in every], str(sum(1 for c in every if _value(c, 2023, "employees") > 700))),
        ("m06", "What was the difference between the highest and the lowest revenue among the four companies "
                "in 2022, in millions of US dollars?", "revenue", [(c, 2022) for c in every],
         _show(max(_value(c, 2022, "revenue") for c in every) - min(_value(c, 2022, "revenue") for c in every))),
        ("m07", "Which company spent the most on research and development in 2022?",  # thousands vs millions
         "research_and_development", [(c, 2022) for c in every],
         max(every, key=lambda c: _value(c, 2022, "research_and_development"))),
        ("m08", "What was the combined net income of the food and energy companies in 2023, in millions of "
                "US dollars?", "net_income", [("Birch Foods", 2023), ("Cedar Energy", 2023)],
         _show(_value("Birch Foods", 2023, "net_income") + _value("Cedar Energy", 2023, "net_income"))),
        ("m09", "How many employees did the four companies have in total at the end of 2022?", "employees",
         [(c, 2022) for c in every], str(sum(int(_value(c, 2022, "employees")) for c in every))),
        ("m10", "Which company's revenue fell from 2022 to 2023?", "revenue",
         [(c, y) for c in every for y in (2022, 2023)], min(every, key=growth.get)),
    ]
    questions = []
    for qid, text, field, pairs, answer in specs:
        rows = _rows(field, pairs)
        unit = {"m04": " percent"}.get(qid, "" if field == "employees" else " million US dollars")
        source = [f"{r['company']} {r['year']}: " + ", ".join(f"{k[6:]} {v}" for k, v in r.items()
                                                               if k.startswith("value_")) for r in rows]
        extra = {"metadata": rows, "source_answer": source, "evidence_documents": [r["id"] for r in rows],
                 "hop_type": "cross-document", "domain": "finance", "category": "analytical",
                 "final_answer": f"{answer}{unit if answer[:1].isdigit() or answer[:1] == '-' else ''}"}
        evidence = [Evidence(r["id"], 2) for r in rows]
        questions.append(Question(qid, text, [[answer]], evidence, extra))
    return questions


def write_mudabench_sample(out: str | Path) -> dict:
    """Write OUT/pdfs (10 PDFs), OUT/metadata.jsonl and OUT/questions.jsonl (10 analytical questions).

    Returns:
        {"pdfs", "metadata", "questions", "documents", "pages", "question_count"}
    """
    import pymupdf

    out = Path(out)
    pdfs = out / "pdfs"
    pdfs.mkdir(parents=True, exist_ok=True)
    metadata = []
    for company, year in FIGURES:
        _annual_report(pdfs / f"{doc_id(company, year)}.pdf", company, year)
        metadata.append({"document": doc_id(company, year), "company": company, "sector": COMPANIES[company][0],
                         "year": year, "report_type": "annual report"})
    extras = [("Alder Robotics", 2023, "Alder Robotics cut the energy use of its test halls by 18 percent. "
               "Revenue from refurbished robots reached 4 percent of sales. 96 employees volunteered in schools."),
              ("Birch Foods", 2023, "Birch Foods sourced 71 percent of its wheat from certified farms and "
               "reduced food waste at its bakeries by 2,400 tonnes. Net income is reported in the annual report.")]
    for company, year, text in extras:
        name = doc_id(company, year, "sustainability-report")
        _sustainability_report(pdfs / f"{name}.pdf", company, year, text)
        metadata.append({"document": name, "company": company, "sector": COMPANIES[company][0], "year": year,
                         "report_type": "sustainability report"})
    (out / "metadata.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metadata), encoding="utf-8")
    questions = _questions()
    write_jsonl(out / "questions.jsonl", questions)
    pages = sum(pymupdf.open(p).page_count for p in pdfs.glob("*.pdf"))
    return {"pdfs": str(pdfs), "metadata": str(out / "metadata.jsonl"), "questions": str(out / "questions.jsonl"),
            "documents": len(metadata), "pages": pages, "question_count": len(questions)}
