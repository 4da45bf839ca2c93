"""The MuDABench-style sample: gold facts agree with what the PDFs print, answers follow from the facts,
and the metadata filters a planner would write select exactly each question's documents."""

import json
import re
from decimal import Decimal

import pytest

from engine.datasets import load_questions
from engine.datasets.sample_mudabench import write_mudabench_sample
from engine.eval.metrics.mudabench import mudabench_answer_correct, rows_from_metadata
from tools.corpus import read_metadata_file, select_documents


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("muda")
    info = write_mudabench_sample(out)
    return out, info


def test_files_and_counts(sample):
    out, info = sample
    assert (info["documents"], info["pages"], info["question_count"]) == (12, 32, 14)
    questions, errors = load_questions(out / "questions.jsonl")
    assert not errors and len(questions) == 14
    rows, problems = read_metadata_file(out / "metadata.jsonl")
    assert not problems and len(rows) == 12
    assert {r["report_type"] for r in rows.values()} == {"annual report", "sustainability report", "年度报告"}
    assert json.loads((out / "conversion.json").read_text()) == {"CNY/USD": 0.14}


def test_gold_facts_are_what_page_2_prints(sample):
    import pymupdf

    out, _ = sample
    questions, _ = load_questions(out / "questions.jsonl")
    checked = 0
    for question in questions:
        for row in rows_from_metadata(question.extra["metadata"]):
            text = pymupdf.open(out / "pdfs" / f"{row['document']}.pdf")[1].get_text()
            thousands = "in thousands of US dollars" in text
            numbers = {Decimal(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)}
            for name, value in row["values"].items():
                if isinstance(value, str):  # a categorical fact: the auditor's name as page 2 prints it
                    assert f"Independent auditor: {value}" in text, (row["document"], name, value)
                    checked += 1
                    continue
                assert name.endswith(("_count", "_cny_million")) == ("人民币百万元" in text or name.endswith("_count"))
                value = Decimal(str(value))
                printed = value if name.endswith("_count") or not thousands else value * 1000
                assert abs(printed) in numbers, (row["document"], name, value)
                checked += 1
    assert checked == 46 + 4 + 8 + 2 + 2  # m01-m10, the auditors, the two-column, the currency, the Chinese


def _values(question, name):
    return {row["company"]: Decimal(str(row[f"value_{name}"])) for row in question.extra["metadata"]}


def test_final_answers_follow_from_the_gold_facts(sample):
    out, _ = sample
    q = {x.id: x for x in load_questions(out / "questions.jsonl")[0]}
    revenue = _values(q["m01"], "revenue_usd_million")
    assert mudabench_answer_correct(str(sum(revenue.values()) / 4), q["m01"].answer_variants)
    income = _values(q["m02"], "net_income_usd_million")
    assert q["m02"].answer_variants == [[max(income, key=income.get)]]
    assert mudabench_answer_correct("46.5", q["m03"].answer_variants)  # 15.91 + 3.6 + 5.84 + 21.2
    rows = q["m04"].extra["metadata"]
    by = {(r["company"], r["year"]): Decimal(str(r["value_revenue_usd_million"])) for r in rows}
    growth = [(by[(c, 2023)] - by[(c, 2022)]) / by[(c, 2022)] * 100 for c in {r["company"] for r in rows}]
    assert mudabench_answer_correct(str(sum(growth) / 4), q["m04"].answer_variants)
    assert q["m05"].answer_variants == [["3"]] and q["m09"].answer_variants == [["4240"]]
    assert mudabench_answer_correct("153.8", q["m06"].answer_variants)
    rd = _values(q["m07"], "research_and_development_usd_million")
    assert q["m07"].answer_variants == [[max(rd, key=rd.get)]] == [["Dune Semiconductors"]]  # 17.9 > 12.64 (12,640 thousand)
    assert q["m10"].answer_variants == [["Cedar Energy"]]
    assert mudabench_answer_correct("32.93", q["m08"].answer_variants)
    assert not mudabench_answer_correct("32.83", q["m08"].answer_variants)
    auditors = {r["company"]: r["value_auditor"] for r in q["m11"].extra["metadata"]}
    assert q["m11"].answer_variants == [[c for c, a in auditors.items() if a == "Harwell & Stone"]] == [
        ["Alder Robotics", "Cedar Energy"]]
    rows = q["m12"].extra["metadata"]
    margin = {r["company"]: r["value_net_income_usd_million"] / r["value_revenue_usd_million"] for r in rows}
    assert q["m12"].answer_variants == [[max(margin, key=margin.get)]] == [["Cedar Energy"]]  # 15.73 / 131.5
    birch, donghu = q["m13"].extra["metadata"]
    assert mudabench_answer_correct(str(birch["value_revenue_usd_million"] + donghu["value_revenue_cny_million"] * 0.14),
                                    q["m13"].answer_variants)  # 225.8 + 1412.3 x 0.14 = 423.522
    assert mudabench_answer_correct("203.4", q["m14"].answer_variants)  # 97.5 + 105.9 yuan millions


@pytest.mark.parametrize(("qid", "restriction"), [
    ("m01", {"year": [2023], "report_type": ["annual report"]}),
    ("m04", {"year": [2022, 2023], "report_type": ["annual report"]}),
    ("m06", {"year": ["2022"], "report_type": ["annual report"]}),
    ("m08", {"year": [2023], "sector": ["food", "energy"], "report_type": ["annual report"]}),
    ("m13", {"year": [2023], "company": ["Birch Foods", "东湖新材"], "report_type": ["annual report", "年度报告"]}),
    ("m14", {"company": ["东湖新材"]}),
])
def test_a_planners_filter_selects_exactly_the_gold_documents(sample, qid, restriction):
    out, _ = sample
    q = {x.id: x for x in load_questions(out / "questions.jsonl")[0]}[qid]
    rows, _ = read_metadata_file(out / "metadata.jsonl")
    assert select_documents(rows, restriction) == sorted(q.extra["evidence_documents"])
    without_type = {k: v for k, v in restriction.items() if k != "report_type"}
    if 2023 in without_type.get("year", []):  # the sustainability reports are 2023: the report type filter matters
        assert len(select_documents(rows, without_type)) > len(q.extra["evidence_documents"])


def test_metadata_lines_are_plain_json(sample):
    out, _ = sample
    first = json.loads((out / "metadata.jsonl").read_text().splitlines()[0])
    assert first == {"document": "alder-annual-report-2022", "company": "Alder Robotics", "sector": "robotics",
                     "year": 2022, "report_type": "annual report"}


def test_the_chinese_pair_is_found_by_search_after_ingest(sample, tmp_path):
    """The Chinese reports go through the normal path (PyMuPDF's built-in china-s font, no font file): their
    text extracts, and a two-character query and a longer phrase find page 2 of both years."""
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import Searcher, build_index

    out, _ = sample
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    for year in (2022, 2023):
        (pdfs / f"donghu-annual-report-{year}.pdf").write_bytes((out / "pdfs" / f"donghu-annual-report-{year}.pdf")
                                                                 .read_bytes())
    summary = ingest([pdfs], tmp_path / "corpus", IngestConfig(workers=1))
    assert summary.pages == 6 and summary.needs_ocr == 0
    build_index(CorpusStore(tmp_path / "corpus"))
    searcher = Searcher(tmp_path / "corpus", backend="reference")
    for query in ("营业", "净利润", '"归属于上市公司股东"'):
        hits = searcher.search(query, k=5, snippets=False)
        assert {(h.document, h.page) for h in hits} == {("donghu-annual-report-2022", 2),
                                                       ("donghu-annual-report-2023", 2)}, query
