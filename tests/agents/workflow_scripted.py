"""A corpus of company reports with metadata, and scripted policies for every stage of the workflow agent.

The scripted reader answers a sub-question from the page it read ("Revenue 97,300 (thousands of US
dollars)", "Auditor KPMG"); the scripted structurer reads those answers back out of the dialog it is
shown and writes the typed record; the parent's plan, program and answer turns are given lists.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from engine.datasets.formats import Evidence, Question
from tests.pdfs import make_text_store

# (company, year) -> revenue as printed, scale words, net income as printed, auditor
REPORTS = {
    ("Alder", 2022): ("84,250", "thousands", "6,180", "KPMG"),
    ("Alder", 2023): ("97,300", "thousands", "8,020", "KPMG"),
    ("Birch", 2022): ("212.4", "millions", "14.9", "Deloitte"),
    ("Birch", 2023): ("225.8", "millions", "17.2", "Deloitte"),
    ("Cedar", 2023): ("131,500", "thousands", "15,730", "KPMG"),
    ("Dune", 2023): ("71.3", "millions", "(3.8)", "PwC"),
}
REVENUE_2023 = {"Alder": 97.3, "Birch": 225.8, "Cedar": 131.5, "Dune": 71.3}  # USD millions
INCOME_2023 = {"Alder": 8.02, "Birch": 17.2, "Cedar": 15.73, "Dune": -3.8}
LABELS = {"revenue": "Revenue", "net_income": "Net income", "auditor": "Auditor"}
KEYWORDS = {"revenue": "revenue", "net_income": "net income", "auditor": "audit"}  # how a sub-question names each


def doc(company: str, year: int, kind: str = "ar") -> str:
    return f"{company.lower()}-{kind}-{year}"


def build_corpus(root: Path, metadata: bool = True) -> Path:
    from tools.search import build_index

    documents, rows = {}, {}
    for (company, year), (revenue, scale, income, auditor) in REPORTS.items():
        documents[doc(company, year)] = [
            f"{company} Annual Report {year}. Letter to shareholders about the year.",
            f"Financial Highlights (in {scale} of US dollars) Revenue {revenue} Net income {income} "
            f"Auditor {auditor}",
            "Outlook: demand stays firm.",
        ]
        rows[doc(company, year)] = {"company": company, "year": year, "report_type": "annual report"}
    documents["alder-sr-2023"] = ["Alder Sustainability Report 2023. Revenue from recycling 4 percent."]
    rows["alder-sr-2023"] = {"company": "Alder", "year": 2023, "report_type": "sustainability report"}
    store = make_text_store(root, documents)
    if metadata:
        assert store.set_metadata(rows, "test") == []
    build_index(store)
    return root


def question(qid: str = "w1", text: str = "What was the average revenue of the four companies in 2023, in millions "
                                         "of US dollars?", answer: str = "131.475") -> Question:
    rows = [{"id": doc(c, 2023), "company": c, "year": 2023, "value_revenue_usd_million": v}
            for c, v in REVENUE_2023.items()]
    return Question(qid, text, [[answer]], [Evidence(r["id"], 2) for r in rows],
                    {"metadata": rows, "evidence_documents": [r["id"] for r in rows], "hop_type": "cross-document"})


REVENUE = {"name": "revenue", "type": "number", "unit": "USD million"}
INCOME = {"name": "net_income", "type": "number", "unit": "USD million"}
AUDITOR = {"name": "auditor", "type": "category"}
PLAN = {"restriction": {"year": [2023], "report_type": ["annual report"]}, "fields": [REVENUE],
        "templates": [{"subquery": "What was the revenue of {company} in {year} ({report_type})?",
                       "fields": ["revenue"]}],
        "period": "2023"}
AVERAGE = "import statistics\nprint(round(statistics.mean(r['revenue'] for r in records), 3))"


def plan_reply(**changes) -> str:
    return json.dumps({**PLAN, **changes})


def code_reply(code: str = AVERAGE) -> str:
    return json.dumps({"code": code})


def answer_reply(text: str | None = None):
    """The final-answer turn: `text`, or (None) what the program printed, read from the prompt."""
    def reply(messages) -> str:
        printed = messages[-1][1].split("It printed:\n", 1)[1].split("\n\nReply with", 1)[0]
        return json.dumps({"answer": printed.strip() if text is None else text})

    return reply


def reader(qid: str, turn: int, messages) -> str | None:
    """A document episode that searches, then answers every fact its sub-question names from the page it read."""
    if turn == 1:
        return json.dumps({"tool": "search", "query": "revenue"})
    last = messages[-1][1]
    if ("File: " in last and "Page: " in last) or "Answer now" in last:
        history = "\n".join(text for _, text in messages)
        document, page = re.findall(r"File: (\S+), Page: (\d+)", history)[-1]
        page_text = history.rsplit(f"Page: {page}\n", 1)[1]
        subquery = re.findall(r"Sub-question: (.*)", history)[0].lower()
        scale = re.search(r"in (thousands|millions) of US dollars", page_text).group(1)
        parts = []
        for name, label in LABELS.items():
            if KEYWORDS[name] in subquery:
                value = re.search(rf"{label} ([\w,.()]+)", page_text).group(1)
                parts.append(f"{label} {value}" + ("" if name == "auditor" else f" ({scale} of US dollars)"))
        return json.dumps({"tool": "answer", "answer": parts, "citations": [{"document": document, "page": int(page)}]})
    return None


def structurer(qid: str, turn: int, messages, unit: str = "USD") -> str:
    """The structuring step: each field of the prompt read back from the dialog's answers."""
    text = messages[-1][1] if turn > 1 else messages[1][1]
    prompt = messages[1][1]
    dialog = prompt.split("Its dialog:\n", 1)[1]
    names = re.findall(r"^- ([a-z_]+) \(", prompt.split("Fields of each record:\n", 1)[1], re.M)
    record = {}
    for name in names:
        label = LABELS[name]
        found = re.search(rf"{label} ([\w,.()]+)(?: \((thousands|millions) of US dollars\))?", dialog)
        if found is None:
            record[name] = None
        elif name == "auditor":
            record[name] = found.group(1)
        else:
            record[name] = {"value": found.group(1), "scale": found.group(2), "unit": unit}
    record["page"] = int(re.findall(r"pages (\d+)", dialog)[-1])
    assert text
    return json.dumps(record)


def workflow_policy(plans: list[str] | None = None, codes: list[str] | None = None, child=None, structure=None,
                    answers: list | None = None):
    """Parent turns take the next plan, program or answer; children run `child` (default: `reader`) and
    `structure` (default: `structurer`)."""
    plans, codes = list(plans or [plan_reply()]), list(codes or [code_reply()])
    answers = list(answers or [answer_reply()])

    def policy(qid: str, turn: int, messages) -> str:
        if "/structure/" in qid:
            return (structure or structurer)(qid, turn, messages)
        if "/" in qid:
            reply = (child or reader)(qid, turn, messages)
            assert reply is not None, f"the scripted reader has no reply for: {messages[-1][1][:200]}"
            return reply
        last = messages[-1][1]
        if last.startswith(("Metadata fields", "That plan")):
            return plans.pop(0)
        if last.startswith(("You are given an analytical task", "That answer")):
            reply = answers.pop(0) if len(answers) > 1 else answers[0]
            return reply(messages) if callable(reply) else reply
        return codes.pop(0)

    return policy
