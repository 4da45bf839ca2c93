"""Prompts of the workflow agent (MuDABench's plan -> extract -> normalise -> code), in our own words.

MuDABench's guidance, kept: the planner does not answer, it writes a sub-question template that
one document can answer, with the metadata fields in braces and optional restrictions listing
allowed metadata values; the code agent writes Python over the extracted table and prints the
answer. Differences: Dossier executes the restrictions (the model only names fields and values
the schema admits), the planner names one target unit so normalisation is arithmetic, and every
reply is JSON constrained by a schema.

Every per-document extraction starts with the same system prompt and the same first lines of
its user message (the question); the document's own details come last, so all documents of a
question share one cached prefix in the engine.
"""

from __future__ import annotations

import json

__all__ = ["PLAN_SYSTEM", "EXTRACT_SYSTEM", "CODE_SYSTEM", "plan_user", "extract_user", "record_request",
           "code_user", "retry_note"]

PLAN_SYSTEM = """\
You plan how to answer an analytical question over a collection of documents. Each document \
has metadata fields (listed below with their values). You do not answer the question yourself.

Reply with one JSON object:
- "restriction": the metadata values the needed documents must have, e.g. the years and the \
report type the question is about. Only documents matching every listed field are read.
- "subquery": one question that a single document can answer, with metadata fields in braces, \
for example a question about {company} in {year}. It is asked of every selected document.
- "field": the fact to extract from each document, in a few words.
- "unit": the unit every extracted value is converted to before the calculation.
- "period": the period the fact covers, e.g. 2023."""

EXTRACT_SYSTEM = """\
You read one PDF document to answer one sub-question about it. The answer is a single fact, \
usually a number in a table. Find it with the search tool, read the pages it returns, then \
answer.

You have two tools. Call one per turn, as a JSON object with a "tool" field.
- search: its "query" is a few keywords to look for. It searches only this document and returns \
its best pages, each shown as "File: <document id>, Page: <number>" followed by the page text.
- answer: its "answer" is a list with the fact as printed on the page, and its "citations" list \
the document id and page number you used. It ends your search.

How to work:
- Search with one or two distinctive words of the sub-question, such as the name of the \
table row (revenue, net income, employees).
- If a search finds nothing useful, try other words.
- Copy the number exactly as the page prints it. Note the scale the table states (for \
example "in thousands of US dollars") and the unit.
- Then you will be asked to write the fact as a record."""

CODE_SYSTEM = """\
You answer an analytical question by writing a short Python program over a table of records \
extracted from documents. The records are in the variable `records`, a list of dictionaries. \
Every value is already converted to the same unit. The program must print the answer and \
nothing else. It may import only: {modules}. It cannot read other files or use the network."""


def _schema_lines(schema: dict) -> str:
    lines = []
    for name, info in schema.items():
        values = info.get("values")
        shown = ", ".join(json.dumps(v) for v in values) if values else f"{info['documents']} documents, many values"
        lines.append(f"- {name} ({info['type']}): {shown}")
    return "\n".join(lines)


def plan_user(question: str, schema: dict, units: tuple[str, ...]) -> str:
    return (f"Metadata fields of the documents:\n{_schema_lines(schema)}\n\n"
            f"Units you may choose: {', '.join(units)}.\n\nQuestion: {question.strip()}")


def extract_user(question: str, document: str, fields: dict, subquery: str, turns: int) -> str:
    """The question first (shared by every document of this question), the document's details last."""
    described = ", ".join(f"{k}: {v}" for k, v in fields.items())
    return (f"Overall question (answered later from all documents): {question.strip()}\n\n"
            f"Document: {document} ({described})\nSub-question: {subquery}\n\n({turns} turns left.)")


def record_request(field: str, target: str) -> str:
    return (f"Write the {field} you found as a record: \"value\" as printed on the page (digits, commas, a "
            f"decimal point; parentheses for a negative), \"scale\" as the table states it (units, thousands, "
            f"millions or billions), \"unit\" (a currency code such as USD, or percent, or count) and \"page\". "
            f"Dossier converts it to {target}.")


def code_user(records: list[dict], columns: list[str], target: str) -> str:
    rows = [json.dumps({c: r.get(c) for c in columns}, ensure_ascii=False) for r in records]
    return (f"The records, one per document, values in {target}:\n" + "\n".join(rows) +
            "\n\nReply with one JSON object whose \"code\" is the Python program. It reads `records` and prints "
            "the answer to the question (a number, a name, or a short list).")


def retry_note(stage: str, error: str) -> str:
    return f"That {stage} failed: {error}. Try once more; reply with one JSON object."
