"""`dossier sample --suite mudabench`: analytical questions over a small collection with document metadata.

Twelve documents made by the project: annual reports of four invented companies for 2022 and
2023 (a financial-highlights table on page 2, stated in thousands or in millions of US
dollars, and the auditor's name), two sustainability reports that mention similar words but
are not annual reports, so a metadata filter on the report type matters, and a pair of
annual reports written in Chinese (年度报告) by an invented A-share company, 东湖新材, whose
figures are in millions of yuan (人民币百万元). Beside the PDFs, metadata.jsonl gives each
document's company, sector, year and report type (`dossier ingest --metadata`), and
conversion.json the yuan's rate ({"CNY/USD": 0.14}, for `dossier run --conversion-table`).

Fourteen MuDABench-style questions need facts from each of several documents, combined by
arithmetic (an average, a sum, a growth rate, a range, a count, an arg-max), a categorical
fact (the auditor), a two-column record (net margin: net income and revenue per document), a
currency conversion (yuan and dollars in one sum) and one question in Chinese over the
Chinese pair. Each question keeps MuDABench's shape as the importer writes it: `metadata`
holds the gold rows, one per document, with the facts as `value_<name>` (US dollar or yuan
millions as the document prints them, a count, or a name); the final answer is computed here
from the same table the PDFs print, so gold and documents agree.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from engine.datasets.formats import Evidence, Question, write_jsonl
from engine.datasets.sample import _FIXED_METADATA, _page, _paragraph, _table

__all__ = ["write_mudabench_sample", "COMPANIES", "FIGURES", "AUDITORS", "CN_COMPANY", "CN_FIGURES", "CNY_USD"]

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
AUDITORS = {"Alder Robotics": "Harwell & Stone", "Birch Foods": "Mercer Lyle", "Cedar Energy": "Harwell & Stone",
            "Dune Semiconductors": "Quill Partners"}
# The Chinese pair: an invented A-share company, its figures in yuan millions (revenue, R&D, net income, employees)
CN_COMPANY = "东湖新材"
CN_FIGURES = {2022: ("1284.6", "63.2", "97.5", 1530), 2023: ("1412.3", "71.8", "105.9", 1602)}
CN_LABELS = {"revenue": "营业收入", "research_and_development": "研发费用",
             "net_income": "归属于上市公司股东的净利润", "employees": "在职员工人数"}
CNY_USD = Decimal("0.14")  # the sample's conversion table: 1 CNY = 0.14 USD (written to conversion.json)
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
               f"is included in operating expenses.\n\nIndependent auditor: {AUDITORS[company]}")
    p3 = _page(doc, [("Outlook", 16, "hebo")])
    _paragraph(p3, 100, f"In {year + 1} {company} expects demand in the {sector} market to stay firm. "
               "The main risks are input costs and the timing of large orders.")
    doc.set_metadata({**_FIXED_METADATA, "title": f"{company} Annual Report {year}"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _chinese_annual_report(path: Path, year: int) -> None:
    """东湖新材's annual report in Chinese (PyMuPDF's built-in china-s font: no font file needed)."""
    import pymupdf

    current, previous = CN_FIGURES[year], CN_FIGURES.get(year - 1)
    doc = pymupdf.open()
    p1 = doc.new_page(width=595, height=842)
    p1.insert_text((60, 80), f"{CN_COMPANY}股份有限公司 {year}年年度报告", fontsize=18, fontname="china-s")
    p1.insert_textbox(pymupdf.Rect(60, 120, 535, 520), f"致股东：本报告涵盖截至{year}年12月31日的财政年度。"
                      "公司主要生产锂电池隔膜和涂层材料，产品销往国内外电池厂商。", fontsize=11, fontname="china-s")
    p2 = doc.new_page(width=595, height=842)
    p2.insert_text((60, 80), "主要会计数据和财务指标", fontsize=16, fontname="china-s")
    p2.insert_text((60, 104), "（单位：人民币百万元，员工人数除外）", fontsize=10, fontname="china-s")
    header = ["项目", f"{year}年"] + ([f"{year - 1}年"] if previous else [])
    rows = [header]
    for i, field in enumerate(_FIELDS):
        cells = [current[i], previous[i] if previous else None]
        rows.append([CN_LABELS[field], *(f"{c:,}" if field == "employees" else f"{Decimal(c):,.2f}"
                                         for c in cells if c is not None)])
    widths = [230, 110, 110][: len(header)]
    for r, row in enumerate(rows):
        x = 60.0
        for c, cell in enumerate(row):
            rect = pymupdf.Rect(x, 130 + r * 20, x + widths[c], 150 + r * 20)
            p2.draw_rect(rect, color=(0, 0, 0), width=0.6)
            p2.insert_text((rect.x0 + 4, rect.y1 - 6), cell, fontsize=9.5, fontname="china-s")
            x += widths[c]
    p2.insert_textbox(pymupdf.Rect(60, 160 + 20 * len(rows), 535, 600), "审计机构：立信会计师事务所。研发费用计入"
                      "期间费用。", fontsize=10, fontname="china-s")
    p3 = doc.new_page(width=595, height=842)
    p3.insert_textbox(pymupdf.Rect(60, 80, 535, 400), f"展望：{year + 1}年公司预计新能源汽车市场需求保持稳定。"
                      "主要风险是原材料价格波动。", fontsize=11, fontname="china-s")
    doc.set_metadata({**_FIXED_METADATA, "title": f"{CN_COMPANY} {year}年年度报告"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


def _sustainability_report(path: Path, company: str, year: int, lines: str) -> None:
    import pymupdf

    doc = pymupdf.open()
    page = _page(doc, [(f"{company} - Sustainability Report {year}", 20, "hebo")])
    _paragraph(page, 110, lines)
    doc.set_metadata({**_FIXED_METADATA, "title": f"{company} Sustainability Report {year}"})
    doc.save(path, garbage=3, deflate=True, no_new_id=True)


CN_DOC = "donghu-annual-report"  # the Chinese pair's documents: donghu-annual-report-2022, -2023


def _value(company: str, year: int, field: str) -> Decimal:
    figures = CN_FIGURES[year] if company == CN_COMPANY else FIGURES[(company, year)]
    return Decimal(str(figures[_FIELDS.index(field)]))


def _show(value: Decimal) -> str:
    """A gold number: exact, without float noise (the MuDABench tolerance reads integer digits + one decimal)."""
    return f"{value.quantize(Decimal('0.0001')).normalize():f}"


def _meta(company: str, year: int) -> dict:
    if company == CN_COMPANY:
        return {"id": f"{CN_DOC}-{year}", "company": company, "sector": "materials", "year": year,
                "report_type": "年度报告"}
    return {"id": doc_id(company, year), "company": company, "sector": COMPANIES[company][0], "year": year,
            "report_type": "annual report"}


def _row(company: str, year: int, fields: list[str]) -> dict:
    """One gold row: the document's metadata and each fact as the document states it (its currency's millions)."""
    row, schema = _meta(company, year), {}
    currency, shown = ("cny", "yuan") if company == CN_COMPANY else ("usd", "US dollar")
    for field in fields:
        if field == "auditor":
            name, value, label = "value_auditor", AUDITORS[company], "Independent auditor"
        elif field == "employees":
            name, value, label = f"value_{field}_count", float(_value(company, year, field)), _LABELS[field]
        else:
            name, value = f"value_{field}_{currency}_million", float(_value(company, year, field))
            label = f"{_LABELS[field]} ({shown} millions)"
        row[name], schema[name] = value, label
    return {**row, "schema": schema}


def _rows(field: str | list[str], pairs: list[tuple[str, int]]) -> list[dict]:
    return [_row(c, y, [field] if isinstance(field, str) else field) for c, y in pairs]


def _questions() -> list[Question]:
    every = list(COMPANIES)
    growth = {c: (_value(c, 2023, "revenue") - _value(c, 2022, "revenue")) / _value(c, 2022, "revenue") * 100
              for c in every}
    margin = {c: _value(c, 2023, "net_income") / _value(c, 2023, "revenue") for c in every}
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
        # a categorical fact: the auditor named on page 2
        ("m11", "Which of the four companies had their 2023 accounts audited by Harwell & Stone?", "auditor",
         [(c, 2023) for c in every], [c for c in every if AUDITORS[c] == "Harwell & Stone"]),
        # a two-column record: net income and revenue of each document
        ("m12", "Which company had the highest net margin (net income divided by revenue) in 2023?",
         ["revenue", "net_income"], [(c, 2023) for c in every], max(every, key=margin.get)),
        # a currency conversion: yuan and dollars in one sum, at conversion.json's rate
        ("m13", f"What was the combined 2023 revenue of Birch Foods and {CN_COMPANY}, in millions of US dollars "
                f"(yuan converted at 1 CNY = {CNY_USD} USD)?", "revenue", [("Birch Foods", 2023), (CN_COMPANY, 2023)],
         _show(_value("Birch Foods", 2023, "revenue") + _value(CN_COMPANY, 2023, "revenue") * CNY_USD)),
        # a question in Chinese over the Chinese pair
        ("m14", f"{CN_COMPANY}2022年和2023年归属于上市公司股东的净利润合计为多少百万元人民币？", "net_income",
         [(CN_COMPANY, 2022), (CN_COMPANY, 2023)],
         _show(_value(CN_COMPANY, 2022, "net_income") + _value(CN_COMPANY, 2023, "net_income"))),
    ]
    units = {"m04": " percent", "m14": " 百万元人民币"}
    questions = []
    for qid, text, field, pairs, answer in specs:
        rows = _rows(field, pairs)
        unit = units.get(qid, "" if field == "employees" else " million US dollars")
        source = [f"{r['company']} {r['year']}: " + ", ".join(f"{k[6:]} {v}" for k, v in r.items()
                                                               if k.startswith("value_")) for r in rows]
        parts = answer if isinstance(answer, list) else [answer]
        numeric = len(parts) == 1 and (parts[0][:1].isdigit() or parts[0][:1] == "-")
        extra = {"metadata": rows, "source_answer": source, "evidence_documents": [r["id"] for r in rows],
                 "hop_type": "cross-document", "domain": "finance", "category": "analytical",
                 "final_answer": ", ".join(parts) + (unit if numeric else "")}
        evidence = [Evidence(r["id"], 2) for r in rows]
        questions.append(Question(qid, text, [parts], evidence, extra))
    return questions


def write_mudabench_sample(out: str | Path) -> dict:
    """Write OUT/pdfs (12 PDFs), OUT/metadata.jsonl, OUT/conversion.json and OUT/questions.jsonl (14 questions).

    Returns:
        {"pdfs", "metadata", "conversion_table", "questions", "documents", "pages", "question_count"}
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
    for year in CN_FIGURES:
        _chinese_annual_report(pdfs / f"{CN_DOC}-{year}.pdf", year)
        meta = _meta(CN_COMPANY, year)
        metadata.append({"document": meta.pop("id"), **meta})
    (out / "conversion.json").write_text(json.dumps({"CNY/USD": float(CNY_USD)}) + "\n", encoding="utf-8")
    lines = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in metadata)
    (out / "metadata.jsonl").write_text(lines, encoding="utf-8")
    questions = _questions()
    write_jsonl(out / "questions.jsonl", questions)
    pages = sum(pymupdf.open(p).page_count for p in pdfs.glob("*.pdf"))
    return {"pdfs": str(pdfs), "metadata": str(out / "metadata.jsonl"),
            "conversion_table": str(out / "conversion.json"), "questions": str(out / "questions.jsonl"),
            "documents": len(metadata), "pages": pages, "question_count": len(questions)}
