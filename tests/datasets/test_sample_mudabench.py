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
    assert (info["documents"], info["pages"], info["question_count"]) == (10, 26, 10)
    questions, errors = load_questions(out / "questions.jsonl")
    assert not errors and len(questions) == 10
    rows, problems = read_metadata_file(out / "metadata.jsonl")
    assert not problems and len(rows) == 10
    assert {r["report_type"] for r in rows.values()} == {"annual report", "sustainability report"}


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
                value = Decimal(str(value))
                printed = value if name.endswith("_count") or not thousands else value * 1000
                assert abs(printed) in numbers, (row["document"], name, value)
                checked += 1
    assert checked == 46


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


@pytest.mark.parametrize(("qid", "restriction"), [
    ("m01", {"year": [2023], "report_type": ["annual report"]}),
    ("m04", {"year": [2022, 2023], "report_type": ["annual report"]}),
    ("m06", {"year": ["2022"], "report_type": ["annual report"]}),
    ("m08", {"year": [2023], "sector": ["food", "energy"], "report_type": ["annual report"]}),
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
