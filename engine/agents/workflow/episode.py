"""The workflow agent (MuDABench, Figure 3): plan -> per-document extraction -> structuring -> code -> answer.

One episode per analytical question, driven by the rollout runner:

  plan       one model turn (JSON schema from the corpus's metadata): a restriction, typed fields
             and one or more sub-query templates (plan.py checks MuDABench's template rules).
             Dossier executes the restrictions over the corpus's document metadata
             (`dossier ingest --metadata`) and fills each template per selected document.
             Without corpus metadata the question is Unknown at planning: an imported question's
             own metadata rows name its gold documents, which the planner must not see.
  extract    a `Spawn` of one `DocumentEpisode` per (template, document) (document.py): the BM25
             agent searching only that document. All run in the same engine steps; their prompts
             share one prefix (system prompt + question), computed once and reused.
  structure  one `StructureEpisode` per document, in the plan's document order (structure.py):
             its dialogs -> a typed JSON record that extends the records so far; Dossier checks
             the types and converts units, scales and currencies (the conversion table). It joins
             the same spawn (`on_child_done`) as soon as the document's extractions and the
             previous document's structuring have ended, so structuring overlaps the other
             documents' extraction. Plan order, not finishing order, keeps each prompt's "records
             so far" independent of scheduling (batch sizes, concurrency).
  code       one model turn in the plan's conversation, once every document is structured: a
             Python program over the records, run in tools/sandbox.
  answer     one model turn: the task, the records, the code and what it printed -> the answer.

A stage that fails (a plan that breaks a rule, no document selected, a program that raises or
prints nothing, an answer that is not JSON) is retried once with the error shown; a second
failure answers "Unknown" with the stage and reason. Documents that yield no record are left out
of the table and listed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from engine.agents.actions import Done, Spawn, ToolJob, Turn
from engine.agents.workflow.document import DocumentEpisode, DocumentView, ExtractionTask
from engine.agents.workflow.plan import PLAN_TOKENS, Plan, fill_template, parse_plan, plan_schema
from engine.agents.workflow.prompts import (ANSWER_SYSTEM, CODE_SYSTEM, PLAN_SYSTEM, answer_user, code_user,
                                            plan_user, retry_note)
from engine.agents.workflow.records import TARGET_UNITS, ConversionTable, first_object
from engine.agents.workflow.structure import StructureEpisode
from engine.datasets.formats import Evidence, Prediction, Question
from tools.errors import DossierError

__all__ = ["WorkflowEpisode", "UNKNOWN", "CODE_TOKENS", "ANSWER_TOKENS", "NO_METADATA"]

UNKNOWN = "Unknown"
RETRY_TEMPERATURE = 0.7  # a failed stage's one retry samples (seeded), so it is not a greedy copy of what failed
CODE_TOKENS = 256  # a short program over the records
ANSWER_TOKENS = 96  # the final answer: a number, a name or a short list, as JSON
MAX_CODE_CHARS = 700
MAX_ANSWER_CHARS = 200
MAX_OUTPUT_CHARS = 1500  # of the program's output shown to the answer turn
CODE_SCHEMA = {"type": "object", "properties": {"code": {"type": "string", "minLength": 5, "maxLength": MAX_CODE_CHARS}},
               "required": ["code"], "additionalProperties": False}
ANSWER_SCHEMA = {"type": "object",
                 "properties": {"answer": {"type": "string", "minLength": 1, "maxLength": MAX_ANSWER_CHARS}},
                 "required": ["answer"], "additionalProperties": False}
NO_METADATA = ("the corpus has no document metadata, and the planner selects documents by it: ingest the corpus "
               "with `dossier ingest --metadata FILE` (one JSON line per document: its id and fields such as "
               "company, year, report type). An imported question's own metadata rows are not used: they name "
               "its gold documents")


@dataclass
class WorkflowEpisode:
    question: Question
    settings: object  # AgentSettings (the workflow's own: extract_iterations, conversion_table)
    env: object  # AgentEnv
    stage: str = "plan"  # plan -> extract (extraction and structuring in flight) -> code -> answer -> done
    steps: list = field(default_factory=list)  # the parent's model calls (plan, code, answer)
    plan: Plan | None = None
    children: list = field(default_factory=list)  # DocumentEpisodes, in (template, document) order
    structured: list = field(default_factory=list)  # StructureEpisodes, in document order
    records: list = field(default_factory=list)  # the table the program reads (extended document by document)
    code_runs: list = field(default_factory=list)  # {"code", "result"} per program run
    answer: str | None = None
    failure: dict | None = None  # {"stage", "reason"} when the answer is Unknown
    retried: set = field(default_factory=set)
    reason: str | None = None
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    _input_delta: str = ""
    _pending_code: str | None = None
    _unread: dict = field(default_factory=dict)  # document -> its extractions still running
    _next: int = 0  # index in plan.documents of the next document to structure (or skip)
    _structuring: bool = False  # a StructureEpisode is in flight (one at a time: each sees the records before it)

    def __post_init__(self):
        from tools.corpus.metadata import metadata_schema

        self.metadata = self.env.store.document_metadata() if self.env is not None else {}
        self.metadata_source = "corpus" if self.metadata else None  # never the question's own (gold) rows
        self.schema = metadata_schema(self.metadata)
        self.table = ConversionTable.load(getattr(self.settings, "conversion_table", None))  # --conversion-table

    @property
    def iterations(self) -> int:
        return len(self.steps)

    # --- plan ----------------------------------------------------------------------------------------
    def first_turn(self):
        if not self.metadata:
            return self._give_up("planning", NO_METADATA)
        return self._turn([("system", PLAN_SYSTEM), ("user", plan_user(self.question.question, self.schema,
                                                                       TARGET_UNITS))],
                          plan_schema(self.schema), PLAN_TOKENS)

    def _turn(self, messages, schema: dict | None, max_new_tokens: int, temperature: float | None = None) -> Turn:
        self._input_delta = "\n\n".join(f"<{role}> {content}" for role, content in messages)
        return Turn(messages, allow_search=False, schema=schema if self.settings.structured else None,
                    max_new_tokens=max_new_tokens, temperature=temperature)

    def _step(self, raw: str, tokens: dict, model_s: float, name: str) -> dict:
        step = {"step": self.iterations + 1, "stage": name, "input_delta": self._input_delta, "raw_output": raw,
                "tool_call": None, "tool_result": None, "tokens": tokens,
                "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}}
        self.steps.append(step)
        return step

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        if self.stage == "plan":
            return self._on_plan(raw, turn, tokens, model_s)
        if self.stage == "answer":
            return self._on_answer(raw, tokens, model_s)
        assert self.stage == "code", f"a model turn arrived in stage {self.stage}"
        return self._on_code(raw, turn, tokens, model_s)

    def _on_plan(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        step = self._step(raw, tokens, model_s, "plan")
        try:
            self.plan = parse_plan(raw, self.metadata)
        except DossierError as err:
            step["tool_result"] = {"error": str(err)}
            return self._retry("planning", str(err), plan_schema(self.schema), PLAN_TOKENS)
        step["tool_call"] = {"name": "plan", "arguments": self.plan.to_json()}
        step["tool_result"] = {"documents": self.plan.documents}
        self.stage = "extract"
        self.children = [self._child(index, doc) for index, template in enumerate(self.plan.templates)
                         for doc in template.documents]
        for child in self.children:
            self._unread[child.task.document] = self._unread.get(child.task.document, 0) + 1
        return Spawn(list(self.children), on_child_done=self._on_child_done)

    def _child(self, index: int, document: str) -> DocumentEpisode:
        fields, template = self.metadata[document], self.plan.templates[index]
        task = ExtractionTask(self.question.question, document, fields, fill_template(template.subquery, fields),
                              template.fields, index, self._page_count(document))
        settings = replace(self.settings, agent="bm25", max_iterations=self.settings.extract_iterations)
        suffix = document if len(self.plan.templates) == 1 else f"{document}#{index + 1}"
        child = Question(f"{self.question.id}/{suffix}", task.subquery, [], [], {})
        return DocumentEpisode(child, settings, DocumentView(self.env, document), task=task)

    def _page_count(self, document: str) -> int:
        try:
            return self.env.store.document(document).page_count
        except DossierError:
            return 1  # a document named by the metadata but missing from the corpus: search finds nothing

    # --- extract -> structure (document by document, as they finish) -> code --------------------------
    def _on_child_done(self, child) -> list[StructureEpisode]:
        """One extraction or structuring ended: the next document's structuring, if it can start now."""
        if isinstance(child, StructureEpisode):
            self.structured.append(child)
            if child.row is not None:
                self.records.append(child.row)  # the table grows as each document is structured
            self._structuring = False
        else:
            self._unread[child.task.document] -= 1
        return self._next_structuring()

    def _next_structuring(self) -> list[StructureEpisode]:
        """The next document in plan order whose extractions have all ended, unless one is being structured.

        A document none of whose sub-questions was answered is skipped (listed by `_failed_documents`).
        """
        documents = self.plan.documents
        while not self._structuring and self._next < len(documents) and not self._unread[documents[self._next]]:
            document = documents[self._next]
            self._next += 1
            if any(c.answer is not None for c in self.children if c.task.document == document):
                self._structuring = True
                return [self._structure(document)]
        return []

    def on_children(self, children: list) -> Turn | Done:
        assert self._next == len(self.plan.documents) and not self._structuring, "a document was not structured"
        return self._start_code()

    def _structure(self, document: str) -> StructureEpisode:
        mine = [c for c in self.children if c.task.document == document and c.answer is not None]
        pages = list(dict.fromkeys(p for c in mine for p in c.pages_seen))
        question = Question(f"{self.question.id}/structure/{document}", self.question.question, [], [], {})
        return StructureEpisode(question, self.question.question, document, dict(self.metadata[document]),
                                self.plan.fields_of(document), "\n".join(c.dialog() for c in mine),
                                [dict(r) for r in self.records], pages, self._page_count(document), self.table,
                                structured=self.settings.structured)

    def _start_code(self):
        if not self.records:
            stages = {d["stage"] for d in self._failed_documents()}
            stage = "structuring" if stages == {"structuring"} else "extraction"
            return self._give_up(stage, f"none of the {len(self.plan.documents)} documents yielded a record")
        self.stage = "code"
        from tools.sandbox import DEFAULT_MODULES

        units = {f.name: f.unit for f in self.plan.fields if f.type == "number"}
        text = CODE_SYSTEM.format(modules=", ".join(DEFAULT_MODULES)) + "\n\n" + code_user(
            self.question.question, self.records, units)
        return self._turn([("user", text)], CODE_SCHEMA, CODE_TOKENS)

    def _on_code(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        step = self._step(raw, tokens, model_s, "code")
        code = _code_of(raw)
        if code is None:
            step["tool_result"] = {"error": "no program: reply with {\"code\": \"...\"}"}
            return self._retry("code", step["tool_result"]["error"], CODE_SCHEMA, CODE_TOKENS)
        step["tool_call"] = {"name": "python", "arguments": {"code": code}}
        self._pending_code = code
        records = [dict(r) for r in self.records]
        return ToolJob(lambda: _run_program(code, records, self.settings.allow_unsandboxed_code))

    def on_tool_result(self, result):
        step = self.steps[-1]
        step["tool_result"] = result.to_json()
        step["timing"]["tool_s"] = round(result.wall_s, 4)
        self.code_runs.append({"code": self._pending_code, "result": result.to_json()})
        printed = result.stdout.strip()
        if result.ok and printed:
            self.stage = "answer"  # MuDABench's final-answer step: task, records, code and output -> the answer
            text = ANSWER_SYSTEM + "\n\n" + answer_user(self.question.question, self.records, self._pending_code,
                                                        printed[-MAX_OUTPUT_CHARS:])
            return self._turn([("user", text)], ANSWER_SCHEMA, ANSWER_TOKENS)
        error = result.error if not result.ok else "the program printed nothing; print the answer"
        return self._retry("code", error, CODE_SCHEMA, CODE_TOKENS)

    def _on_answer(self, raw: str, tokens: dict, model_s: float):
        step = self._step(raw, tokens, model_s, "answer")
        try:
            answer = first_object(raw, "answer").get("answer")
        except DossierError as err:
            answer, error = None, str(err)
        else:
            error = "'answer' must be a non-empty string"
        if not isinstance(answer, str) or not answer.strip():
            step["tool_result"] = {"error": error}
            return self._retry("answer", error, ANSWER_SCHEMA, ANSWER_TOKENS)
        step["tool_call"] = {"name": "answer", "arguments": {"answer": answer}}
        self.answer, self.stage = answer.strip()[:MAX_ANSWER_CHARS], "done"
        return self._finish("answered")

    # --- failure and retries ---------------------------------------------------------------------------
    def _retry(self, stage: str, error: str, schema: dict, max_new_tokens: int):
        """The stage's turn once more with the error shown, sampled at RETRY_TEMPERATURE (seeded by the runner,
        so a run repeats); the second failure gives up. Greedy, the planning retry was byte-identical to the
        rejected plan in 8 of 11 retries of mudabench-sample (issue 50): the message alone rarely moved it."""
        if stage in self.retried:
            return self._give_up(stage, error)
        self.retried.add(stage)
        what = {"planning": "plan", "code": "program", "answer": "answer"}[stage]
        return self._turn([("user", retry_note(what, error))], schema, max_new_tokens,
                          temperature=max(RETRY_TEMPERATURE, self.settings.temperature))

    def _give_up(self, stage: str, reason: str) -> Done:
        self.failure = {"stage": stage, "reason": reason}
        self.answer, self.stage = UNKNOWN, "done"
        return self._finish("unknown")

    def _finish(self, reason: str) -> Done:
        self.reason = reason
        self.wall_s = time.perf_counter() - self.started
        return Done(reason)

    def force_answer(self, note: str) -> Turn:
        """The context is nearly full: the same stage once more, with the note (the runner fails it if it still does not fit)."""
        schema, tokens = {"code": (CODE_SCHEMA, CODE_TOKENS), "answer": (ANSWER_SCHEMA, ANSWER_TOKENS)}.get(
            self.stage, (plan_schema(self.schema), PLAN_TOKENS))
        return self._turn([("user", note)], schema, tokens)

    def fail(self, reason: str) -> Done:
        stage = {"plan": "planning", "code": "code", "answer": "answer"}.get(self.stage, self.stage)
        return self._give_up(stage, reason)

    # --- records ---------------------------------------------------------------------------------------
    def citations(self) -> list[Evidence]:
        return list(dict.fromkeys(Evidence(r["document"], r["page"]) for r in self.records)) if self.answer != UNKNOWN \
            else []

    def _failed_documents(self) -> list[dict]:
        """Documents left out of the table: no sub-question answered, or a record that failed twice."""
        out = []
        for document in (self.plan.documents if self.plan else []):
            mine = [c for c in self.children if c.task.document == document]
            if mine and all(c.answer is None for c in mine):
                out.append({"document": document, "stage": "extraction", "reason": mine[0].error})
        out += [{"document": s.document, "stage": "structuring", "reason": s.error} for s in self.structured
                if s.row is None]
        return out

    def _unconverted(self) -> list[dict]:
        return [{"document": s.document, **u} for s in self.structured for u in s.unconverted]

    def _dialogs(self) -> dict[str, str]:
        """Each document's dialog for MuDABench's coverage judge: its sub-questions, answers and record."""
        out = {}
        for document in (self.plan.documents if self.plan else []):
            lines = [c.dialog() for c in self.children if c.task.document == document]
            done = next((s for s in self.structured if s.document == document), None)
            if done is not None and done.row is not None:
                shown = {k: v for k, v in done.row.items() if k != "document" and k not in self.metadata[document]}
                lines.append("Record: " + ", ".join(f"{k} {v}" for k, v in shown.items()))
            elif done is not None:
                lines.append(f"Error: {done.error}")
            out[document] = "\n".join(lines)
        return out

    def _tokens(self) -> dict:
        totals = {"prefilled": 0, "cached": 0, "generated": 0}
        for step in self.steps + [s for c in [*self.children, *self.structured] for s in c.steps]:
            for key in totals:
                totals[key] += int(step["tokens"].get(key, 0))
        return totals

    def _summary(self) -> dict:
        return {"plan": self.plan.to_json() if self.plan else None, "metadata": self.metadata_source,
                "records": self.records, "failure": self.failure, "failed_documents": self._failed_documents(),
                "unconverted": self._unconverted(), "conversion_table": self.table.to_json(), "code": self.code_runs}

    def prediction(self) -> Prediction:
        searches = [q for c in self.children for q in c.search_history]
        calls = self.iterations + sum(c.iterations for c in [*self.children, *self.structured])
        raw = {s.document: s.raw_record for s in self.structured if s.row is not None}  # as the model wrote them
        extra = {"agent": "workflow", "finish": self.reason, "tokens": self._tokens(), "wall_s": round(self.wall_s, 3),
                 "steps": calls, "document_dialogs": self._dialogs(),
                 "workflow": {**self._summary(), "raw_records": raw}}
        return Prediction(self.question.id, self.question.question, self.answer or UNKNOWN, self.citations(), searches,
                          calls, extra)

    def _all_steps(self) -> tuple[list[dict], list[list[int]], list[list[int]]]:
        """Every model call of the episode in reading order, and each extraction's and structuring's step numbers.

        The plan's calls come first, then each sub-question's extraction calls (tagged `"stage": "extract"`
        and `"document"`) in the plan's order, then each document's structuring calls (`"structure"`), then
        the code and answer calls; steps are numbered 1.. over the whole list. The documents ran
        concurrently, so this order is the plan's, not the clock's.
        """
        plan = [s for s in self.steps if s["stage"] == "plan"]
        rest = [s for s in self.steps if s["stage"] != "plan"]
        extract = [{**s, "stage": "extract", "document": c.task.document} for c in self.children for s in c.steps]
        structure = [{**s, "stage": "structure", "document": e.document} for e in self.structured for s in e.steps]
        merged = [{**s, "step": number} for number, s in enumerate(plan + extract + structure + rest, start=1)]
        numbers, start = [], len(plan) + 1
        for episode in [*self.children, *self.structured]:
            numbers.append(list(range(start, start + len(episode.steps))))
            start += len(episode.steps)
        return merged, numbers[:len(self.children)], numbers[len(self.children):]

    def trajectory(self) -> dict:
        final = {"answer": self.answer, "citations": [c.to_json() for c in self.citations()], "reason": self.reason,
                 **({"failure": self.failure} if self.failure else {})}
        steps, extract_numbers, structure_numbers = self._all_steps()
        extractions = [{**c.summary(), "step_numbers": n} for c, n in zip(self.children, extract_numbers)]
        structuring = [{**e.summary(), "step_numbers": n} for e, n in zip(self.structured, structure_numbers)]
        return {"id": self.question.id, "question": self.question.question, "agent": "workflow", "steps": steps,
                "final": final,
                "workflow": {**self._summary(), "extractions": extractions, "structuring": structuring}}


def _code_of(raw: str) -> str | None:
    try:
        code = first_object(raw, "program").get("code")
    except DossierError:
        return None
    return code if isinstance(code, str) and code.strip() else None


def _run_program(code: str, records: list[dict], allow_unsandboxed: bool):
    from tools.sandbox import SandboxLimits, run_python

    return run_python(code, inputs={"records": records}, limits=SandboxLimits(allow_unsandboxed=allow_unsandboxed))
