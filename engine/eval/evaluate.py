"""The evaluation orchestrator: gold + predictions (+ trajectories) -> item results and a report.

    from engine.eval import EvalConfig, evaluate, load_inputs
    inputs = load_inputs("runs/bm25")            # a run directory, or predictions + gold
    result = evaluate(inputs.questions, inputs.predictions, inputs.episodes, EvalConfig())
    result.report["accuracy"], result.typed.summary.kuiper   # the report.json dict, or typed (engine/eval/report.py)

The report's keys are documented in docs/cli.md ("dossier eval"); registered scorers and sections
(engine/eval/scorers.py, engine/eval/sections.py) add theirs. Nothing here loads a model
unless asked: the judge and the drift embedder are passed in by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.datasets.formats import LineError, Prediction, Question
from engine.eval.metrics.anls import ACCURACY_THRESHOLD, ANLSScorer
from engine.eval.calibration import JudgeCalibration
from engine.eval.analyses.effort import effort_measures, measures_of
from engine.eval.analyses.human import behaviour_summary
from engine.eval.analyses.retrieval_curve import cumulative_hits, recovery_after_failed_first_query
from engine.eval.items import ItemResult, score_item
from engine.eval.matching import GoldIndex, match_records
from engine.eval.metrics.mudabench import (TOLERANCE_SCORER, combine_coverage, coverage_for_question, rows_from_metadata,
                                          tolerance_row_judge)
from engine.eval.analyses.steps import accuracy_at_budgets, first_query_hits, query_drift
from engine.eval.report import REPORT_VERSION, JudgeBlock, Report
from engine.eval.summary import breakdowns, summarize
from engine.eval.trajectories import Episode
from engine.eval.sections import SectionInputs, declared_analyses, registered_sections
from tools.errors import DossierError

__all__ = ["EvalConfig", "EvalResult", "evaluate"]


@dataclass(slots=True)
class EvalConfig:
    """How to evaluate; the defaults need no model at all."""

    judge: Callable | None = None  # (question, gold_variants, answer) -> verdict; None: no semantic accuracy
    calibration: JudgeCalibration = field(default_factory=JudgeCalibration)  # judge q0/q1 for Rogan-Gladen
    bootstrap: int = 1000  # Kuiper bootstrap resamples; 0 turns the interval off
    seed: int = 0  # bootstrap seed
    level: float = 0.95  # confidence level of every interval
    embedder: Callable | None = None  # texts -> embeddings, for query drift; None: no drift
    coverage_judge: Callable | None = None  # MuDABench row judge; None: deterministic tolerance judge
    mudabench_judge: Callable | None = None  # MuDABench final-answer judge (question, variants, answer) -> bool; None: tolerance
    docvqa_require_marker: bool = False  # DocVQA-2026: an answer without "FINAL ANSWER:" is wrong
    progress: Callable[[int], None] | None = None  # called with 1 after each scored item (a progress bar's update)
    agent: str | None = None  # the run's agent (run.json), whose spec declares its analyses; None: the predictions'
    # shared "agent" field, if any

    def __post_init__(self) -> None:
        if self.bootstrap < 0:
            raise DossierError(f"bootstrap resamples must be >= 0, got {self.bootstrap}")
        if not 0.0 < self.level < 1.0:
            raise DossierError(f"confidence level {self.level} must lie strictly between 0 and 1")


@dataclass(slots=True)
class EvalResult:
    """The report and the per-item results it was computed from.

    `report` stays the JSON-ready dict (report.json) that callers add to and write; `typed` reads it as a
    `Report`, so a caller's additions (record_provenance's judge and inputs) are always in it.
    """

    report: dict  # Report.to_dict(): the report.json keys, in order
    items: list[ItemResult]

    @property
    def typed(self) -> Report:
        """The report as a typed `Report` (engine/eval/report.py)."""
        return Report.from_dict(self.report)


def _episodes_by_id(questions: list[Question], episodes: list[Episode], index: GoldIndex) -> tuple[dict, int]:
    """Gold id -> its episode, and how many episodes matched no gold item."""
    matched = match_records(questions, episodes, index)
    return {q.id: episode for q, episode in matched.pairs if episode is not None}, len(matched.unmatched)


def _trajectory_metrics(questions: list[Question], episodes: list[Episode], items: list[ItemResult],
                        scorer: ANLSScorer, by_id: dict[str, Episode], unmatched: int,
                        embedder: Callable | None) -> dict:
    budgets = accuracy_at_budgets(
        [(q.id, q.answer_variants) for q in questions], by_id,
        lambda answer, variants: scorer(answer, variants) >= ACCURACY_THRESHOLD,
    )
    drift = None
    if embedder is not None:
        drift = query_drift(by_id, {i.id: i.correct for i in items}, embedder)
        drift.pop("per_episode")
    return {
        "episodes": len(episodes),
        "matched": len(by_id),
        "unmatched": unmatched,
        "accuracy_at_budget": budgets,
        "first_query": first_query_hits([(q.id, q.evidence) for q in questions], by_id),
        "query_drift": drift,
    }


def _coverage(questions: list[Question], predictions: dict[str, Prediction | None], judge: Callable) -> dict | None:
    per_question = []
    for question in questions:
        rows = question.extra.get("source_rows")
        if rows is None and isinstance(question.extra.get("metadata"), list):
            rows = rows_from_metadata(question.extra["metadata"])  # as `dossier import mudabench` keeps them
        if not rows:
            continue
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise DossierError(f"question {question.id!r}: 'source_rows' must be a list of objects")
        prediction = predictions.get(question.id)
        dialogs = prediction.extra.get("document_dialogs") if prediction is not None else None
        # no "document_dialogs" at all (rag, bm25): the agent keeps no per-document records, so coverage is not
        # measured ("–"), rather than every fact counted wrong (issue 50 item 5)
        per_question.append(coverage_for_question(question.question, rows, dialogs if isinstance(dialogs, dict) else None,
                                                  judge))
    return combine_coverage(per_question) if per_question else None


def _agent_of(predictions: list[Prediction]) -> str | None:
    """The agent every prediction names in its "agent" field, else None."""
    agents = {p.extra.get("agent") for p in predictions}
    return agents.pop() if len(agents) == 1 and None not in agents else None


def evaluate(
    questions: list[Question],
    predictions: list[Prediction],
    episodes: list[Episode] | None = None,
    config: EvalConfig | None = None,
    errors: list[LineError] | None = None,
) -> EvalResult:
    """Score predictions against gold questions.

    Args:
        questions: the gold items (the denominator of every metric).
        predictions: the system's predictions; matched by id, else question text.
        episodes: trajectories, for step-budget accuracy, first-query hits and drift.
        config: the judge, calibration, bootstrap and drift settings.
        errors: skipped input lines, repeated in the report.
    """
    config = config or EvalConfig()
    index = GoldIndex(questions)
    matched = match_records(questions, predictions, index)
    scorer = ANLSScorer()
    items = []
    for question, prediction in matched.pairs:
        items.append(score_item(question, prediction, scorer, config.judge, config))
        if config.progress is not None:
            config.progress(1)
    if config.mudabench_judge is not None:  # the paper's final-answer judge replaces the tolerance rule's verdict
        for (question, _), item in zip(matched.pairs, items):
            item.scores["mudabench"] = bool(config.mudabench_judge(question.question, question.answer_variants,
                                                                    item.answer))
    predicted = {q.id: p for q, p in matched.pairs}
    by_episode = _episodes_by_id(questions, episodes, index) if episodes is not None else ({}, 0)
    report = Report(
        report_version=REPORT_VERSION,
        summary=summarize(items, config.calibration, config.bootstrap, config.seed, config.level, detailed=True),
        n_predictions=len(predictions),
        missing_predictions=matched.missing,
        unmatched_predictions=len(matched.unmatched),
        unmatched_prediction_ids=[p.id if p.id is not None else p.question[:80] for p in matched.unmatched[:20]],
        duplicate_predictions=len(matched.duplicates),
        matched_by_text=matched.matched_by_text,
        skipped_lines=len(errors or []),
        skipped_line_reasons=[str(e) for e in (errors or [])[:50]],
        judge=JudgeBlock(used=config.judge is not None, q0=config.calibration.q0, q1=config.calibration.q1,
                         m0=config.calibration.m0, m1=config.calibration.m1),
        breakdowns=breakdowns(items, config.calibration, config.level),
        steps=None if episodes is None else _trajectory_metrics(questions, episodes, items, scorer, *by_episode,
                                                                config.embedder),
        behaviour=behaviour_summary(items, predicted, by_episode[0] if episodes is not None else None, config.level),
        mudabench_coverage=_coverage(questions, predicted, config.coverage_judge or tolerance_row_judge),
        mudabench_scoring={  # which scorer produced the MuDABench figures
            "final_answer": getattr(config.mudabench_judge, "label", "LLM judge") if config.mudabench_judge
            else TOLERANCE_SCORER,
            "coverage": getattr(config.coverage_judge, "label", "LLM row judge") if config.coverage_judge
            else TOLERANCE_SCORER},
        sections={},
        effort_measures=None,
    )
    declared = declared_analyses(config.agent or _agent_of(predictions))  # what the run's agent asks for
    inputs = SectionInputs(matched.pairs, items, by_episode[0] if episodes is not None else None, config.level)
    sections = registered_sections()  # engine/eval/sections.py: those every run may have, then agent-declared ones
    for section in sections:
        if not section.declared:
            report.sections[section.name] = section.run(inputs)
    # MADQA Appendix F.4: Kuiper under tokens and time as well as steps (engine/eval/analyses/effort.py)
    # (a trajectory's "child_tokens" add its children's model calls to the token measures)
    report.effort_measures = effort_measures([(measures_of(item.effort, predicted.get(item.id),
                                                           by_episode[0].get(item.id)), item.correct)
                                              for item in items])
    evidence_rows = [(q.id, q.evidence, item.correct) for (q, _), item in zip(matched.pairs, items)]
    if report.steps is not None:  # MADQA Figures 22 and 23 (engine/eval/analyses/retrieval_curve.py)
        report.steps["cumulative_hits"] = cumulative_hits(evidence_rows, by_episode[0])
        report.steps["recovery"] = recovery_after_failed_first_query(evidence_rows, by_episode[0], config.level)
    for section in sections:
        if section.declared:
            report.sections[section.name] = section.run(inputs) if section.name in declared else None
    return EvalResult(report.to_dict(), items)
