"""A corpus of company reports with metadata, and scripted policies for every stage of the workflow agent."""

from __future__ import annotations

import json
import re
from pathlib import Path

from engine.datasets.formats import Evidence, Question
from tests.pdfs import make_text_store

# (company, year) -> revenue as printed, scale words, net income as printed
REPORTS = {
    ("Alder", 2022): ("84,250", "thousands", "6,180"),
    ("Alder", 2023): ("97,300", "thousands", "8,020"),
    ("Birch", 2022): ("212.4", "millions", "14.9"),
    ("Birch", 2023): ("225.8", "millions", "17.2"),
    ("Cedar", 2023): ("131,500", "thousands", "15,730"),
    ("Dune", 2023): ("71.3", "millions", "(3.8)"),
}
REVENUE_2023 = {"Alder": 97.3, "Birch": 225.8, "Cedar": 131.5, "Dune": 71.3}  # USD millions


def doc(company: str, year: int, kind: str = "ar") -> str:
    return f"{company.lower()}-{kind}-{year}"


def build_corpus(root: Path) -> Path:
    from tools.search import build_index

    documents, metadata = {}, {}
    for (company, year), (revenue, scale, income) in REPORTS.items():
        documents[doc(company, year)] = [
            f"{company} Annual Report {year}. Letter to shareholders about the year.",
            f"Financial Highlights (in {scale} of US dollars) Revenue {revenue} Net income {income}",
            "Outlook: demand stays firm.",
        ]
        metadata[doc(company, year)] = {"company": company, "year": year, "report_type": "annual report"}
    documents["alder-sr-2023"] = ["Alder Sustainability Report 2023. Revenue from recycling 4 percent."]
    metadata["alder-sr-2023"] = {"company": "Alder", "year": 2023, "report_type": "sustainability report"}
    store = make_text_store(root, documents)
    assert store.set_metadata(metadata, "test") == []
    build_index(store)
    return root


def question(qid: str = "w1") -> Question:
    rows = [{"id": doc(c, 2023), "company": c, "year": 2023, "value_revenue_usd_million": v}
            for c, v in REVENUE_2023.items()]
    return Question(qid, "What was the average revenue of the four companies in 2023, in millions of US dollars?",
                    [["131.475"]], [Evidence(r["id"], 2) for r in rows],
                    {"metadata": rows, "evidence_documents": [r["id"] for r in rows], "hop_type": "cross-document"})


PLAN = {"restriction": {"year": [2023], "report_type": ["annual report"]},
        "subquery": "What was the revenue of {company} in {year}?", "field": "revenue", "unit": "USD million",
        "period": "2023"}
AVERAGE = "import statistics\nprint(round(statistics.mean(r['value'] for r in records), 3))"


def plan_reply(**changes) -> str:
    return json.dumps({**PLAN, **changes})


def code_reply(code: str = AVERAGE) -> str:
    return json.dumps({"code": code})


def reader(qid: str, turn: int, messages) -> str | None:
    """A document episode that searches, answers from the page it read, then writes the record."""
    if turn == 1:
        return json.dumps({"tool": "search", "query": "revenue"})
    last = messages[-1][1]
    if ("File: " in last and "Page: " in last) or "Answer now" in last:
        history = "\n".join(text for _, text in messages)
        document, page = re.findall(r"File: (\S+), Page: (\d+)", history)[-1]
        page_text = history.rsplit(f"Page: {page}\n", 1)[1]
        value = re.search(r"Revenue ([\d,.()]+)", page_text).group(1)
        return json.dumps({"tool": "answer", "answer": [value], "citations": [{"document": document, "page": int(page)}]})
    if last.startswith("Write the revenue"):
        history = "\n".join(text for _, text in messages)
        value = re.findall(r"Revenue ([\d,.()]+)", history)[-1]
        scale = re.findall(r"in (thousands|millions) of US dollars", history)[-1]
        page = int(re.findall(r"Page: (\d+)", history)[-1])
        return json.dumps({"value": value, "scale": scale, "unit": "USD", "page": page})
    return None


def workflow_policy(plans: list[str] | None = None, codes: list[str] | None = None, child=None):
    """Parent turns take the next plan, then the next program; children run `child` (default: `reader`)."""
    plans, codes = list(plans or [plan_reply()]), list(codes or [code_reply()])

    def policy(qid: str, turn: int, messages) -> str:
        if "/" in qid:
            reply = (child or reader)(qid, turn, messages)
            assert reply is not None, f"the scripted reader has no reply for: {messages[-1][1][:200]}"
            return reply
        return plans.pop(0) if messages[-1][1].startswith(("Metadata fields", "That plan")) else codes.pop(0)

    return policy
