"""MADQA's LLM judge over a whole run: batched through Dossier's engine, cached, resumable.

`dossier eval RUN --judge MODEL` decides first, without the model, which items need a
judgement at all (MADQA's two-stage scoring, `engine.eval.judge.semantic_score`: empty,
exact, refusal and too-long answers never reach the judge). The rest are keyed by
(question, accepted answers, answer); keys already in the cache file are read from it, and
the others are judged all at once: every prompt is one fresh session on one engine, all
submitted together so the engine batches their prefills and decodes (the shared rubric
prefix is read from the prefix cache), each reply constrained to the verdict's JSON schema.
Each verdict is appended to the cache the moment its request finishes, so an interrupted
judging resumes where it stopped, and a second `dossier eval` of the same run judges nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from engine.eval.judge import Verdict, build_judge_prompt, parse_verdict
from engine.eval.llm_judge import VERDICT_SCHEMA
from tools.errors import DossierError

__all__ = ["JudgeItem", "JudgeCache", "BatchedJudge", "judge_key", "prejudge"]

CACHE_VERSION = 1


@dataclass(frozen=True, slots=True)
class JudgeItem:
    question: str
    gold_variants: tuple[tuple[str, ...], ...]
    answer: tuple[str, ...] | str

    @classmethod
    def of(cls, question: str, gold_variants, answer) -> JudgeItem:
        frozen = tuple(answer) if isinstance(answer, list) else answer
        return cls(question, tuple(tuple(v) for v in gold_variants), frozen)

    def key(self, model: str) -> str:
        return judge_key(model, self.question, self.gold_variants, self.answer)


def judge_key(model: str, question: str, gold_variants, answer) -> str:
    """The cache key of one judgement: the judge model, the question, the accepted answers and the answer."""
    blob = json.dumps([CACHE_VERSION, model, question, [list(v) for v in gold_variants],
                       list(answer) if isinstance(answer, (list, tuple)) else answer], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


class JudgeCache:
    """Verdicts by key, in a JSONL file appended one line per judgement (a torn last line is ignored)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self.verdicts: dict[str, Verdict] = {}
        if self.path is not None and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                    self.verdicts[record["key"]] = Verdict.coerce(record["verdict"])
                except (ValueError, KeyError, TypeError, DossierError):
                    continue  # a line cut by a crash: that item is judged again

    def get(self, key: str) -> Verdict | None:
        return self.verdicts.get(key)

    def put(self, key: str, verdict: Verdict, item: JudgeItem, model: str, reply: str) -> None:
        self.verdicts[key] = verdict
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"key": key, "verdict": verdict.value, "model": model, "question": item.question,
                  "answer": item.answer, "reply": reply[:200]}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


@dataclass
class BatchedJudge:
    """Judge many items at once on Dossier's engine (loaded on the first call that needs it).

    Args:
        model: what `Engine.from_pretrained` accepts (a packaged name, "default", a folder, a .gguf file).
        engine_kwargs: EngineConfig fields (cpu_threads, dtype, quantization, kv_cache_gib).
        in_flight: prompts submitted at once (the engine batches them).
    """

    model: str
    engine_kwargs: dict = field(default_factory=dict)
    in_flight: int = 16
    unparsed: int = 0  # replies that named no verdict (counted incorrect)
    _engine: object = None

    def load(self):
        """The engine; a judge that cannot load stops here, naming the model."""
        if self._engine is None:
            try:
                from engine.core.config import EngineConfig
                from engine.core.llm_engine import Engine
            except ImportError as err:
                raise DossierError(f"--judge {self.model}: the LLM judge needs Dossier's inference engine "
                                   f"(engine/core/llm_engine.py), which does not import here ({err}); run without "
                                   "--judge (ANLS*, exact match and every other metric still work)") from None

            try:
                self._engine = Engine.from_pretrained(self.model, EngineConfig(**self.engine_kwargs))
            except DossierError as err:
                raise DossierError(f"--judge {self.model}: the judge model cannot load ({err}); nothing was scored") \
                    from None
            if self._engine.processor is None:
                raise DossierError(f"--judge {self.model}: the model has no tokenizer or chat template; give a packaged "
                                   "model, a GGUF file or a model folder with a tokenizer")
        return self._engine

    def judge_all(self, items: list[JudgeItem], on_verdict: Callable[[JudgeItem, Verdict, str], None]) -> None:
        """Judge `items`; `on_verdict(item, verdict, reply)` is called as each one finishes."""
        from engine.core.sampling_params import SamplingParams

        engine = self.load()
        params = SamplingParams(temperature=0.0, max_new_tokens=24, json_schema=VERDICT_SCHEMA)
        waiting = list(items)
        running: dict[int, tuple[JudgeItem, object]] = {}
        while waiting or running:
            while waiting and len(running) < self.in_flight:
                item = waiting.pop(0)
                session = engine.open_session()
                session.append_message("user", build_judge_prompt(item.question, [list(v) for v in item.gold_variants],
                                                                  list(item.answer) if isinstance(item.answer, tuple)
                                                                  else item.answer))
                session.append_generation_prompt()
                request = engine.submit(session, params)
                running[request.request_id] = (item, session)
            for request in engine.step():
                item, session = running.pop(request.request_id)
                session.close()
                reply = request.text or ""
                try:
                    verdict = parse_verdict(reply)
                except DossierError:
                    self.unparsed += 1
                    verdict = Verdict.incorrect
                if request.error:
                    raise DossierError(f"--judge {self.model}: a judgement failed in the engine: {request.error}")
                on_verdict(item, verdict, reply)


@dataclass
class PrejudgeStats:
    needed: int = 0  # items that go to the judge (the rest are decided without it)
    from_cache: int = 0
    judged: int = 0
    unparsed: int = 0
    seconds: float = 0.0


def prejudge(items: Iterable[JudgeItem], judge: BatchedJudge, cache: JudgeCache,
             progress: Callable[[int], None] | None = None) -> tuple[Callable, PrejudgeStats]:
    """Judge every item not in the cache; return a judge callable answering from the verdicts, and the counts.

    The returned callable raises a DossierError for an item that was not judged here, so an item
    can never be scored with a verdict it did not get.
    """
    stats = PrejudgeStats()
    unique = list(dict.fromkeys(items))
    stats.needed = len(unique)
    missing = [item for item in unique if cache.get(item.key(judge.model)) is None]
    stats.from_cache = stats.needed - len(missing)
    if progress is not None and stats.from_cache:
        progress(stats.from_cache)
    started = time.perf_counter()

    def record(item: JudgeItem, verdict: Verdict, reply: str) -> None:
        cache.put(item.key(judge.model), verdict, item, judge.model, reply)
        stats.judged += 1
        if progress is not None:
            progress(1)

    if missing:
        judge.judge_all(missing, record)
    stats.unparsed = judge.unparsed
    stats.seconds = round(time.perf_counter() - started, 1)

    def answer(question: str, gold_variants, answer) -> Verdict:
        verdict = cache.get(judge_key(judge.model, question, gold_variants, answer))
        if verdict is None:
            raise DossierError(f"no judgement for the answer {answer!r} to {question[:60]!r}: it was not prejudged")
        return verdict

    return answer, stats


def items_to_judge(questions, predictions) -> list[JudgeItem]:
    """The items of a run that MADQA's two-stage scoring sends to the judge (the same rule `evaluate` applies).

    A scoring pass with a recording judge finds them, so the rule lives in one place
    (`engine.eval.judge.semantic_score`).
    """
    from engine.eval.evaluate import EvalConfig, evaluate

    asked: list[JudgeItem] = []

    def record(question, gold_variants, answer):
        asked.append(JudgeItem.of(question, gold_variants, answer))
        return Verdict.incorrect

    evaluate(questions, predictions, None, EvalConfig(judge=record, bootstrap=0))
    return asked


def load_calibration(path: str | Path) -> dict:
    """A calibration written by `dossier eval calibrate-judge --out FILE`: q0, q1, m0, m1, n and the judge model."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DossierError(f"--calibration {path}: cannot read it as JSON ({err}); write one with "
                           "`dossier eval calibrate-judge --judge MODEL --out FILE`") from None
    missing = [k for k in ("q0", "q1", "m0", "m1", "n") if k not in data]
    if missing:
        raise DossierError(f"--calibration {path}: lacks {', '.join(missing)}; write it with "
                           "`dossier eval calibrate-judge --judge MODEL --out FILE`")
    return data


MIN_CALIBRATION_ITEMS = 20  # fewer labelled items cannot support a correction (the floor)
