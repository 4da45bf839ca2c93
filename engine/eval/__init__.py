"""Evaluation: metrics of MADQA, MuDABench and DocVQA-2026, statistics and reports."""

from engine.eval.metrics.anls import ANLSScorer, anls_star
from engine.eval.metrics.answers import exact_match, is_refusal
from engine.eval.metrics.page_doc_f1 import doc_prf, hop_type, page_prf
from engine.eval.calibration import JudgeCalibration, calibrate_judge, rogan_gladen, rogan_gladen_ci
from engine.eval.compare import compare_items, load_system_items
from engine.eval.metrics.docvqa import docvqa_correct
from engine.eval.evaluate import EvalConfig, EvalResult, evaluate
from engine.eval.inputs import EvalInputs, load_inputs
from engine.eval.items import ItemResult
from engine.eval.judge import Judge, ScriptedJudge, Verdict, build_judge_prompt
from engine.eval.metrics.kuiper import kuiper, kuiper_bootstrap_ci, kuiper_madqa, wasted_effort
from engine.eval.metrics.mudabench import coverage_for_question, numeric_match
from engine.eval.reports.files import load_item_results, write_reports
from engine.eval.splits import SplitConfig, make_splits
from engine.eval.stats import cohen_kappa, mcnemar_exact, spearman_rho, wilson_interval
from engine.eval.taxonomy import classify_error

__all__ = [
    "ANLSScorer",
    "anls_star",
    "exact_match",
    "is_refusal",
    "doc_prf",
    "hop_type",
    "page_prf",
    "JudgeCalibration",
    "calibrate_judge",
    "rogan_gladen",
    "rogan_gladen_ci",
    "compare_items",
    "load_system_items",
    "docvqa_correct",
    "EvalConfig",
    "EvalResult",
    "evaluate",
    "EvalInputs",
    "load_inputs",
    "ItemResult",
    "Judge",
    "ScriptedJudge",
    "Verdict",
    "build_judge_prompt",
    "kuiper",
    "kuiper_bootstrap_ci",
    "kuiper_madqa",
    "wasted_effort",
    "coverage_for_question",
    "numeric_match",
    "load_item_results",
    "write_reports",
    "SplitConfig",
    "make_splits",
    "cohen_kappa",
    "mcnemar_exact",
    "spearman_rho",
    "wilson_interval",
    "classify_error",
]
