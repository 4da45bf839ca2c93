"""Prompts of the workflow agent (MuDABench's plan -> extract -> structure -> code -> answer), in our own words.

MuDABench's guidance (its appendix A.7), kept: the planner does not answer; it writes one or
more sub-question templates, each answerable from one document, mutually exclusive, with every
metadata field it selects on in braces, and optional per-template restrictions. Each document
answers its sub-questions in its own search dialog. A structuring step turns each document's
dialog into a typed JSON record that extends the records so far. The code agent writes Python
over the records and prints what answers the task; the final-answer step reads the task, the
records, the code and its output and writes the answer. Differences: Dossier executes the
restrictions and does the unit arithmetic (the model writes numbers as printed, with scale and
unit), and every reply is JSON constrained by a schema.

Every per-document extraction starts with the same system prompt and the same first lines of
its user message (the question); the document's own details come last, so all documents of a
question share one cached prefix in the engine. The structuring prompts share theirs likewise.
"""

from __future__ import annotations

import json

__all__ = ["PLAN_SYSTEM", "EXTRACT_SYSTEM", "STRUCTURE_SYSTEM", "CODE_SYSTEM", "ANSWER_SYSTEM", "plan_user",
           "extract_user", "structure_user", "code_user", "answer_user", "retry_note"]

PLAN_SYSTEM = """\
You plan how to answer an analytical question over a collection of documents. Each document \
has metadata fields (listed below with their values). You do not answer the question yourself.

Reply with one JSON object:
- "restriction": the metadata values the needed documents must have, e.g. the years and the \
report type the question is about. Only documents matching every listed field are read.
- "fields": the facts to extract from each document, each {"name", "type"}: type "number" \
(with "unit", the unit every value is converted to), "category", "boolean", "date" or "text".
- "templates": sub-question templates, each {"subquery", "fields"} (and optionally its own \
"restriction"). Rules: each subquery is a question about ONE document, with metadata fields in \
braces, for example a question about {company} in {year}; templates do not repeat each other \
or ask for the same field; every metadata field you restrict is in braces in some template.
- "period": the period the facts cover, e.g. 2023."""

EXTRACT_SYSTEM = """\
You read one PDF document to answer one sub-question about it. The answer is a fact stated \
in the document: a number in a table, a name, a yes or no, or a date. Find it with the search \
tool, read the pages it returns, then answer.

You have two tools. Call one per turn, as a JSON object with a "tool" field.
- search: its "query" is a few keywords to look for. It searches only this document and returns \
its best pages, each shown as "File: <document id>, Page: <number>" followed by the page text.
- answer: its "answer" is a list with the fact as printed on the page, and its "citations" list \
the document id and page number you used. It ends your search.

How to work:
- Search with one or two distinctive words of the sub-question, such as the name of the \
table row (revenue, net income, auditor).
- If a search finds nothing useful, try other words.
- Copy a number exactly as the page prints it, followed by the scale and the unit the table \
states (for example "12,640 (thousands of US dollars)")."""

STRUCTURE_SYSTEM = """\
You turn one document's question-and-answer dialog into a JSON record for an analytical task. \
The record has one key per field below and "page" (the page the facts are on). Write a number \
as {"value": as printed, "scale": units, thousands, millions or billions as the document \
states it, "unit": a currency code such as USD or CNY, or percent, or count}; Dossier converts \
it. Write null for a field the dialog does not give. Keep the names and units consistent with \
the records so far."""

CODE_SYSTEM = """\
You answer an analytical question by writing a short Python program over a table of records \
extracted from documents. The records are in the variable `records`, a list of dictionaries. \
Numbers are already converted to the units shown. The program must print what answers the \
task. It may import only: {modules}. It cannot read other files or use the network."""

ANSWER_SYSTEM = """\
You are given an analytical task, the JSON records extracted from the documents, a Python \
program over them and what it printed. Write the final answer to the task from them: short, \
with the numbers, names or list it asks for."""


def _schema_lines(schema: dict) -> str:
    lines = []
    for name, info in schema.items():
        values = info.get("values")
        shown = ", ".join(json.dumps(v) for v in values) if values else f"{info['documents']} documents, many values"
        lines.append(f"- {name} ({info['type']}): {shown}")
    return "\n".join(lines)


def plan_user(question: str, schema: dict, units: tuple[str, ...]) -> str:
    return (f"Metadata fields of the documents:\n{_schema_lines(schema)}\n\n"
            f"Units a number field may be converted to: {', '.join(units)}.\n\nQuestion: {question.strip()}")


def extract_user(question: str, document: str, fields: dict, subquery: str, turns: int) -> str:
    """The question first (shared by every document of this question), the document's details last."""
    described = ", ".join(f"{k}: {v}" for k, v in fields.items())
    return (f"Overall question (answered later from all documents): {question.strip()}\n\n"
            f"Document: {document} ({described})\nSub-question: {subquery}\n\n({turns} turns left.)")


def structure_user(question: str, fields: list, records: list[dict], document: str, metadata: dict,
                   dialog: str) -> str:
    """The task and the fields first (shared by every document), the records so far and the new dialog last."""
    wanted = "\n".join(f"- {f.describe()}" for f in fields)
    so_far = json.dumps(records, ensure_ascii=False) if records else "[] (this is the first document)"
    described = ", ".join(f"{k}: {v}" for k, v in metadata.items())
    return (f"Task: {question.strip()}\n\nFields of each record:\n{wanted}\n\nRecords so far: {so_far}\n\n"
            f"New document: {document} ({described})\nIts dialog:\n{dialog}\n\nReply with this document's record.")


def code_user(question: str, records: list[dict], units: dict[str, str]) -> str:
    rows = [json.dumps(r, ensure_ascii=False) for r in records]
    shown = ", ".join(f"{k} in {u}" for k, u in units.items()) or "no numbers"
    return (f"Task: {question.strip()}\n\nThe records, one per document ({shown}):\n" + "\n".join(rows) +
            "\n\nReply with one JSON object whose \"code\" is the Python program. It reads `records` and prints "
            "what answers the task (a number, a name, or a short list).")


def answer_user(question: str, records: list[dict], code: str, output: str) -> str:
    rows = "\n".join(json.dumps(r, ensure_ascii=False) for r in records)
    return (f"Task: {question.strip()}\n\nRecords:\n{rows}\n\nProgram:\n{code}\n\nIt printed:\n{output.strip()}\n\n"
            "Reply with one JSON object whose \"answer\" is the final answer to the task.")


def retry_note(stage: str, error: str) -> str:
    return f"That {stage} failed: {error}. Try once more; reply with one JSON object."
