"""The workflow agent (MuDABench, Figure 3): plan -> per-document extraction -> normalise -> code.

One episode per analytical question, driven by the rollout runner:

  plan      one model turn (JSON schema from the corpus's metadata): restriction, sub-query
            template, fact, target unit, period. Dossier executes the restriction over the
            documents' metadata (`dossier ingest --metadata`, or an imported MuDABench
            question's own rows) and fills the template per selected document.
  extract   a `Spawn` of one `DocumentEpisode` per selected document (document.py):
            the BM25 agent searching only that document, then a record of the fact, converted
            by Dossier to the target unit. All documents run in the same engine steps; their
            prompts share one prefix (system prompt + question), computed once and reused.
  code      one model turn in the plan's conversation: a Python program over the records,
            run in tools/sandbox; what it prints is the answer, the records' pages the citations.

A stage that fails (invalid plan, no document selected, a program that raises or prints
nothing) is retried once with the error shown; a second failure answers "Unknown" with the
stage and reason. Documents that yield no record are left out of the table (and listed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from engine.agents.actions import Done, Spawn, ToolJob, Turn
from engine.agents.workflow.document import DocumentEpisode, DocumentView, ExtractionTask
from engine.agents.workflow.plan import PLAN_TOKENS, Plan, fill_template, parse_plan, plan_schema, question_metadata
from engine.agents.workflow.prompts import CODE_SYSTEM, PLAN_SYSTEM, code_user, plan_user, retry_note
from engine.agents.workflow.records import TARGET_UNITS, first_object
from engine.datasets.formats import Evidence, Prediction, Question
from tools.errors import DossierError

__all__ = ["WorkflowEpisode", "UNKNOWN", "CODE_TOKENS"]

UNKNOWN = "Unknown"
CODE_TOKENS = 256  # a short program over the records
MAX_CODE_CHARS = 700
MAX_ANSWER_CHARS = 200
CODE_SCHEMA = {"type": "object", "properties": {"code": {"type": "string", "minLength": 5, "maxLength": MAX_CODE_CHARS}},
               "required": ["code"], "additionalProperties": False}


@dataclass
class WorkflowEpisode:
    question: Question
    settings: object  # AgentSettings
    env: object  # AgentEnv
    stage: str = "plan"  # plan -> extract -> code -> done
    steps: list = field(default_factory=list)  # the parent's model calls (plan, code)
    plan: Plan | None = None
    children: list = field(default_factory=list)  # DocumentEpisodes, in document order
    records: list = field(default_factory=list)  # the table the program reads
    code_runs: list = field(default_factory=list)  # {"code", "result"} per program run
    answer: str | None = None
    failure: dict | None = None  # {"stage", "reason"} when the answer is Unknown
    retried: set = field(default_factory=set)
    reason: str | None = None
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    _input_delta: str = ""
    _pending_code: str | None = None

    def __post_init__(self):
        stored = self.env.store.document_metadata() if self.env is not None else {}
        self.metadata = stored or question_metadata(self.question)  # the corpus's, else an imported question's
        self.metadata_source = "corpus" if stored else ("question" if self.metadata else None)
        from tools.corpus.metadata import metadata_schema

        self.schema = metadata_schema(self.metadata)

    @property
    def iterations(self) -> int:
        return len(self.steps)

    # --- plan ----------------------------------------------------------------------------------------
    def first_turn(self):
        if not self.metadata:
            return self._give_up("planning", "no document metadata: ingest the corpus with --metadata FILE, "
                                             "or import questions that carry their documents' metadata")
        return self._turn([("system", PLAN_SYSTEM), ("user", plan_user(self.question.question, self.schema,
                                                                       TARGET_UNITS))],
                          plan_schema(self.schema), PLAN_TOKENS)

    def _turn(self, messages, schema: dict | None, max_new_tokens: int) -> Turn:
        self._input_delta = "\n\n".join(f"<{role}> {content}" for role, content in messages)
        return Turn(messages, allow_search=False, schema=schema if self.settings.structured else None,
                    max_new_tokens=max_new_tokens)

    def _step(self, raw: str, tokens: dict, model_s: float, name: str) -> dict:
        step = {"step": self.iterations + 1, "stage": name, "input_delta": self._input_delta, "raw_output": raw,
                "tool_call": None, "tool_result": None, "tokens": tokens,
                "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}}
        self.steps.append(step)
        return step

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        if self.stage == "plan":
            return self._on_plan(raw, turn, tokens, model_s)
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
        return Spawn([self._child(doc) for doc in self.plan.documents])

    def _child(self, document: str) -> DocumentEpisode:
        fields = self.metadata[document]
        task = ExtractionTask(self.question.question, document, fields, fill_template(self.plan.subquery, fields),
                              self.plan.fact, self.plan.unit, self._page_count(document))
        settings = replace(self.settings, agent="bm25", max_iterations=self.settings.extract_iterations)
        child = Question(f"{self.question.id}/{document}", task.subquery, [], [], {})
        return DocumentEpisode(child, settings, DocumentView(self.env, document), task=task)

    def _page_count(self, document: str) -> int:
        try:
            return self.env.store.document(document).page_count
        except DossierError:
            return 1  # a document named by a question's metadata but missing from the corpus: search finds nothing

    # --- extract -> code -------------------------------------------------------------------------------
    def on_children(self, children: list) -> Turn | Done:
        self.children = list(children)
        for child in self.children:
            if child.normalised is not None:
                self.records.append({"document": child.task.document, **child.task.fields,
                                     "value": child.normalised["value"], "unit": child.normalised["unit"],
                                     "page": child.record["page"]})
        if not self.records:
            stages = {c.failed_stage for c in self.children}
            stage = "normalisation" if stages == {"normalisation"} else "extraction"
            return self._give_up(stage, f"none of the {len(self.children)} documents yielded a record")
        self.stage = "code"
        from tools.sandbox import DEFAULT_MODULES

        columns = list(dict.fromkeys(k for r in self.records for k in r))
        text = CODE_SYSTEM.format(modules=", ".join(DEFAULT_MODULES)) + "\n\n" + code_user(
            self.records, columns, self.plan.unit)
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
        return ToolJob(lambda: _run_program(code, records))

    def on_tool_result(self, result):
        step = self.steps[-1]
        step["tool_result"] = result.to_json()
        step["timing"]["tool_s"] = round(result.wall_s, 4)
        self.code_runs.append({"code": self._pending_code, "result": result.to_json()})
        printed = result.stdout.strip()
        if result.ok and printed:
            self.answer = printed[-MAX_ANSWER_CHARS:]
            self.stage = "done"
            return self._finish("answered")
        error = result.error if not result.ok else "the program printed nothing; print the answer"
        return self._retry("code", error, CODE_SCHEMA, CODE_TOKENS)

    # --- failure and retries ---------------------------------------------------------------------------
    def _retry(self, stage: str, error: str, schema: dict, max_new_tokens: int):
        """The stage's turn once more with the error shown; the second failure gives up."""
        if stage in self.retried:
            return self._give_up(stage, error)
        self.retried.add(stage)
        return self._turn([("user", retry_note("plan" if stage == "planning" else "program", error))], schema,
                          max_new_tokens)

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
        schema = CODE_SCHEMA if self.stage == "code" else plan_schema(self.schema)
        return self._turn([("user", note)], schema if self.settings.structured else None, CODE_TOKENS)

    def fail(self, reason: str) -> Done:
        stage = {"plan": "planning", "code": "code"}.get(self.stage, "extraction")
        return self._give_up(stage, reason)

    # --- records ---------------------------------------------------------------------------------------
    def citations(self) -> list[Evidence]:
        return list(dict.fromkeys(Evidence(r["document"], r["page"]) for r in self.records)) if self.answer != UNKNOWN \
            else []

    def _tokens(self) -> dict:
        totals = {"prefilled": 0, "cached": 0, "generated": 0}
        for step in self.steps + [s for c in self.children for s in c.steps]:
            for key in totals:
                totals[key] += int(step["tokens"].get(key, 0))
        return totals

    def prediction(self) -> Prediction:
        searches = [q for c in self.children for q in c.search_history]
        calls = self.iterations + sum(c.iterations for c in self.children)
        printed = {c.task.document: c.record for c in self.children if c.normalised is not None}
        records = [{**r, "raw_value": printed[r["document"]]["value"], "raw_scale": printed[r["document"]]["scale"],
                    "raw_unit": printed[r["document"]]["unit"]} for r in self.records]  # as the page printed it
        extra = {"agent": "workflow", "finish": self.reason, "tokens": self._tokens(), "wall_s": round(self.wall_s, 3),
                 "steps": calls, "document_dialogs": {c.task.document: c.dialog() for c in self.children},
                 "workflow": {"plan": self.plan.to_json() if self.plan else None, "metadata": self.metadata_source,
                              "records": records, "failure": self.failure,
                              "failed_documents": [{"document": c.task.document, "stage": c.failed_stage,
                                                    "reason": c.error} for c in self.children if c.failed_stage]}}
        return Prediction(self.question.id, self.question.question, self.answer or UNKNOWN, self.citations(), searches,
                          calls, extra)

    def _all_steps(self) -> tuple[list[dict], list[list[int]]]:
        """Every model call of the episode in reading order, and each document's step numbers.

        The plan's calls come first, then each document's extraction calls (its searches, answer and
        record, tagged `"stage": "extract"` and `"document"`) in the plan's document order, then the
        code calls; steps are numbered 1.. over the whole list. The documents ran concurrently, so
        this order is the plan's, not the clock's.
        """
        plan = [s for s in self.steps if s["stage"] == "plan"]
        code = [s for s in self.steps if s["stage"] != "plan"]
        extract = [{**s, "stage": "extract", "document": c.task.document} for c in self.children for s in c.steps]
        merged = [{**s, "step": number} for number, s in enumerate(plan + extract + code, start=1)]
        numbers, start = [], len(plan) + 1
        for child in self.children:
            numbers.append(list(range(start, start + len(child.steps))))
            start += len(child.steps)
        return merged, numbers

    def trajectory(self) -> dict:
        final = {"answer": self.answer, "citations": [c.to_json() for c in self.citations()], "reason": self.reason,
                 **({"failure": self.failure} if self.failure else {})}
        steps, numbers = self._all_steps()
        extractions = [{**c.summary(), "step_numbers": n} for c, n in zip(self.children, numbers)]
        return {"id": self.question.id, "question": self.question.question, "agent": "workflow", "steps": steps,
                "final": final,
                "workflow": {"plan": self.plan.to_json() if self.plan else None, "metadata": self.metadata_source,
                             "extractions": extractions, "records": self.records,
                             "code": self.code_runs, "failure": self.failure}}


def _code_of(raw: str) -> str | None:
    try:
        code = first_object(raw, "program").get("code")
    except DossierError:
        return None
    return code if isinstance(code, str) and code.strip() else None


def _run_program(code: str, records: list[dict]):
    from tools.sandbox import run_python

    return run_python(code, inputs={"records": records})
