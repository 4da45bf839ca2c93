"""An LLM judge on Dossier's own inference engine, import-guarded.

`CompletionJudge` turns any text-completion function `prompt -> reply` into a judge: it
renders MADQA's rubric (`engine.eval.judge.build_judge_prompt`) and reads the verdict from
the reply. `CompletionRowJudge` does the same for MuDABench's per-document row judge.
`load_engine_judge(model)` builds one on Dossier's inference engine (`engine.core.llm_engine.Engine`),
imported only here, lazily, and only when `--judge MODEL` is given: each judgement is one chat
turn in a fresh session, greedy, with the reply constrained to the verdict's JSON schema
(structured output), so even a small local model always returns a readable verdict. The
shared rubric prefix of every prompt is computed once thanks to the engine's prefix cache.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable

from engine.eval.judge import Verdict, build_judge_prompt, parse_verdict
from tools.errors import DossierError

__all__ = [
    "CompletionJudge",
    "CompletionRowJudge",
    "build_row_judge_prompt",
    "parse_correct_fields",
    "load_engine_complete",
    "load_engine_judge",
    "load_engine_row_judge",
    "load_engine_answer_judge",
]

# MuDABench's document-wise row judge, in our own words.
_ROW_PROMPT = """You check which facts of one gold table row a system extracted from one document.

Question being answered: {question}
Gold row (already matched to this document; do not judge the document's identity): {row}
Columns to check, with their expected values: {columns}
The system's complete dialog with this document:
{dialog}

Rules: judge each column on its own, against this row and this dialog only. A column is correct only when the
dialog states the same fact for the same entity and year. Numbers are correct when the integer digits and the
first decimal place agree, unless the value is an identifier that must match exactly. Extra information in the
dialog does not matter. Count each column at most once.

Reply with JSON only: {{"correct_metric_fields": ["<column name>", ...]}} (an empty list when none is correct)."""


class CompletionJudge:
    """A judge backed by a completion function; replies without a verdict count as incorrect.

    Args:
        complete: prompt -> the model's reply.
        retries: extra attempts when a reply names no verdict.
    """

    def __init__(self, complete: Callable[[str], str], retries: int = 1) -> None:
        self.complete = complete
        self.retries = retries
        self.unparsed = 0  # replies that named no verdict (after retries)

    def __call__(self, question: str, gold_variants: list[list[str]], answer: str | list[str]) -> Verdict:
        prompt = build_judge_prompt(question, gold_variants, answer)
        for _ in range(self.retries + 1):
            reply = self.complete(prompt)
            try:
                return parse_verdict(reply)
            except DossierError:
                continue
        self.unparsed += 1
        return Verdict.incorrect


def build_row_judge_prompt(question: str, row: dict, columns: dict, dialog: str) -> str:
    """Render the MuDABench row-judge prompt for one gold row and one document dialog."""
    return _ROW_PROMPT.format(question=question, row=json.dumps(row, ensure_ascii=False, sort_keys=True),
                              columns=json.dumps(columns, ensure_ascii=False), dialog=dialog or "(empty dialog)")


def parse_correct_fields(reply: str, columns: dict) -> list[str]:
    """The column names a row-judge reply marks correct, restricted to the row's columns."""
    match = re.search(r"\{.*\}", reply, re.DOTALL)
    fields: list = []
    if match:
        try:
            parsed = json.loads(match.group(0))
            fields = parsed.get("correct_metric_fields", []) if isinstance(parsed, dict) else []
        except json.JSONDecodeError:
            fields = []
    return sorted({str(f) for f in fields if str(f) in columns}) if isinstance(fields, list) else []


class CompletionRowJudge:
    """A MuDABench row judge backed by a completion function (see `engine.eval.metrics.mudabench`)."""

    def __init__(self, complete: Callable[[str], str]) -> None:
        self.complete = complete

    def __call__(self, question: str, row: dict, columns: dict, dialog: str) -> list[str]:
        return parse_correct_fields(self.complete(build_row_judge_prompt(question, row, columns, dialog)), columns)


VERDICT_SCHEMA = {"type": "object", "properties": {"verdict": {"type": "string", "enum": [v.value for v in Verdict]}},
                  "required": ["verdict"]}
ROW_SCHEMA = {"type": "object", "properties": {"correct_metric_fields": {"type": "array", "items": {"type": "string"}}},
              "required": ["correct_metric_fields"]}


def load_engine_complete(model: str, max_tokens: int = 256, json_schema: dict | None = None,
                         engine=None) -> Callable[[str], str]:
    """prompt -> reply from `model` on Dossier's engine: one user turn per call, greedy.

    Args:
        model: what `Engine.from_pretrained` accepts ("default", a local directory, a .gguf file).
        max_tokens: most tokens per reply.
        json_schema: constrain the reply to this JSON schema (structured output).
        engine: an engine already loaded for `model` (e.g. the batched judge's), shared instead of loading another.

    Raises:
        DossierError: the inference engine is not part of this installation yet, or it lacks
            the `complete` entry point this adapter calls.
    """
    try:
        llm_engine = importlib.import_module("engine.core.llm_engine")
        sampling = importlib.import_module("engine.core.sampling_params")
    except ImportError as err:
        raise DossierError(
            f"--judge {model}: the LLM judge needs Dossier's inference engine (engine/llm_engine.py), which this "
            "installation does not have; run without --judge (ANLS*, exact match and all other metrics still work) "
            "or pass a judge from Python with EvalConfig(judge=...)"
        ) from err
    if engine is None:
        engine = llm_engine.Engine.from_pretrained(model)
    params = sampling.SamplingParams(temperature=0.0, max_new_tokens=max_tokens, json_schema=json_schema)

    def complete(prompt: str) -> str:
        session = engine.open_session()
        try:
            session.append_message("user", prompt)
            session.append_generation_prompt()
            return session.generate(params).text
        finally:
            session.close()

    return complete


def load_engine_judge(model: str) -> CompletionJudge:
    """A `CompletionJudge` running `model` on Dossier's engine (errors as `load_engine_complete`)."""
    return CompletionJudge(load_engine_complete(model, max_tokens=24, json_schema=VERDICT_SCHEMA))


def load_engine_row_judge(model: str, engine=None) -> CompletionRowJudge:
    """A MuDABench `CompletionRowJudge` running `model` on Dossier's engine (`engine`: one already loaded)."""
    judge = CompletionRowJudge(load_engine_complete(model, max_tokens=256, json_schema=ROW_SCHEMA, engine=engine))
    judge.label = f"LLM judge {model} (MuDABench's document-wise row judge, A.7.7)"
    return judge


def load_engine_answer_judge(model: str, engine=None):
    """MuDABench's final-answer judge (A.7.10, `engine.eval.metrics.mudabench.CompletionAnswerJudge`) running `model`."""
    from engine.eval.metrics.mudabench import FINAL_ANSWER_SCHEMA, CompletionAnswerJudge

    return CompletionAnswerJudge(load_engine_complete(model, max_tokens=16, json_schema=FINAL_ANSWER_SCHEMA,
                                                      engine=engine),
                                 label=f"LLM judge {model} (MuDABench's final-answer prompt, A.7.10)")
