"""The workflow's structuring step (MuDABench A.7.4): one document's extraction dialog -> one typed JSON record.

A `StructureEpisode` is a child episode with its own conversation: the task, the record's
fields (from the plan, records.record_schema), the records so far and the new document's
dialog; the reply is the document's record, constrained to the schema. Dossier checks each
field's type and converts every number to its field's unit with the conversion table:

    {"revenue": {"value": "97,300", "scale": "thousands", "unit": "USD"}, "page": 2}
    -> {"document": ..., <metadata>, "revenue": 97.3, "revenue_unit": "USD million", "page": 2}

A record with a wrong type (or a unit that cannot be the field's) is retried once with the error
shown; a second failure leaves the document out (`error` set, listed by the parent). A currency
with no rate in the table is not an error: the value stays in its currency and `unconverted`
names it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.agents.actions import Done, Turn
from engine.agents.workflow.prompts import STRUCTURE_SYSTEM, retry_note, structure_user
from engine.agents.workflow.records import ConversionTable, FieldSpec, convert, parse_record, record_schema
from engine.datasets.formats import Question
from tools.errors import DossierError

__all__ = ["StructureEpisode", "RECORD_TOKENS"]

RECORD_TOKENS = 40  # tokens per field of a record (a number is ~25 tokens of JSON)


@dataclass
class StructureEpisode:
    question: Question  # id "<question>/structure/<document>"
    task: str  # the analytical question
    document: str
    metadata: dict  # the document's metadata (copied into its row)
    fields: list[FieldSpec]  # the record's columns (the plan's fields asked of this document)
    dialog: str  # the document's extraction dialog (every sub-question and its answer)
    records: list[dict]  # the records so far (shown for consistent names and units)
    pages: list[int]  # pages the extraction saw (the record must cite one)
    page_count: int
    table: ConversionTable
    structured: bool = True
    steps: list = field(default_factory=list)
    raw_record: dict | None = None  # the record as the model wrote it (parsed)
    row: dict | None = None  # the converted row the program reads
    unconverted: list = field(default_factory=list)  # {"field", "unit", "reason"} per number left in its currency
    error: str | None = None  # why no record (after the retry)
    retried: bool = False
    reason: str | None = None
    started: float = field(default_factory=time.perf_counter)
    _input_delta: str = ""

    @property
    def iterations(self) -> int:
        return len(self.steps)

    def _turn(self, messages) -> Turn:
        self._input_delta = "\n\n".join(f"<{role}> {content}" for role, content in messages)
        schema = record_schema(self.fields, self.pages, self.page_count, self.table)
        return Turn(messages, allow_search=False, schema=schema if self.structured else None,
                    max_new_tokens=16 + RECORD_TOKENS * len(self.fields))

    def first_turn(self) -> Turn:
        user = structure_user(self.task, self.fields, self.records, self.document, self.metadata, self.dialog)
        return self._turn([("system", STRUCTURE_SYSTEM), ("user", user)])

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        step = {"step": self.iterations + 1, "input_delta": self._input_delta, "raw_output": raw, "tool_call": None,
                "tool_result": None, "tokens": tokens, "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}}
        self.steps.append(step)
        try:
            record = parse_record(raw, self.fields, self.table)
            step["tool_call"] = {"name": "record", "arguments": record}
            row, unconverted = self._convert(record)
        except DossierError as err:
            step["tool_result"] = {"error": str(err)}
            if self.retried:
                return self._finish("structuring_failed", str(err))
            self.retried = True
            return self._turn([("user", retry_note("record", str(err)))])
        self.raw_record, self.row, self.unconverted = record, row, unconverted
        step["tool_result"] = {"row": row, **({"unconverted": unconverted} if unconverted else {})}
        return self._finish("answered")

    def _convert(self, record: dict) -> tuple[dict, list]:
        row = {"document": self.document, **self.metadata}
        unconverted = []
        for spec in self.fields:
            value = record[spec.name]
            if spec.type == "number" and value is not None:
                converted = convert(value, spec.unit, self.table)
                row[spec.name], row[f"{spec.name}_unit"] = round(converted.value, 6), converted.unit
                if converted.unconverted:
                    unconverted.append({"field": spec.name, "unit": value["unit"], "reason": converted.unconverted})
            else:
                row[spec.name] = value
                if spec.type == "number":
                    row[f"{spec.name}_unit"] = spec.unit
        row["page"] = record["page"]
        return row, unconverted

    def _finish(self, reason: str, error: str | None = None) -> Done:
        self.reason, self.error = reason, error
        return Done(reason)

    def force_answer(self, note: str) -> Turn:
        return self._turn([("user", note)])

    def fail(self, reason: str) -> Done:
        return self._finish("structuring_failed", reason)

    def summary(self) -> dict:
        return {"document": self.document, "record": self.raw_record, "row": self.row,
                "unconverted": self.unconverted, "error": self.error}
