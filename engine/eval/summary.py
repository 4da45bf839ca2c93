"""Aggregating item results into the report's numbers (overall and per breakdown group).

Every mean is over all gold items in the group: an item without a prediction scores 0
everywhere. Proportions carry Wilson intervals; the judge's score carries the Rogan-Gladen
correction and its interval; Kuiper carries a bootstrap interval.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from engine.eval.calibration import JudgeCalibration, rogan_gladen, rogan_gladen_ci
from engine.eval.items import ItemResult
from engine.eval.scorers import registered_scorers
from engine.eval.metrics.kuiper import kuiper, kuiper_bootstrap_ci, kuiper_madqa, kuiper_permutation_p, wasted_effort
from engine.eval.stats import wilson_interval
from engine.eval.taxonomy import taxonomy_summary

__all__ = ["summarize", "breakdowns", "BREAKDOWN_KEYS"]

BREAKDOWN_KEYS = ("hop_type", "category", "domain")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _proportion(flags: Sequence[bool], level: float) -> tuple[float, list[float]]:
    k = sum(1 for f in flags if f)
    return (k / len(flags) if flags else 0.0), list(wilson_interval(k, len(flags), level))


def summarize(
    items: Sequence[ItemResult],
    calibration: JudgeCalibration | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    detailed: bool = True,
) -> dict:
    """The metrics of a group of items.

    Args:
        items: the group's item results.
        calibration: judge sensitivity/specificity for the Rogan-Gladen correction.
        bootstrap: Kuiper bootstrap resamples (0: no interval).
        seed: bootstrap seed.
        level: confidence level of every interval.
        detailed: also compute the Kuiper curve, the harness's order-dependent Kuiper and the
            effort ratio (the overall summary does, breakdown groups do not).
    """
    calibration = calibration or JudgeCalibration()
    n = len(items)
    out: dict = {"n": n, "n_with_prediction": sum(1 for i in items if i.has_prediction)}
    out["accuracy"], out["accuracy_ci"] = _proportion([i.accurate for i in items], level)
    out["mean_anls"] = _mean([i.anls for i in items])
    out["exact_match"], out["exact_match_ci"] = _proportion([i.exact for i in items], level)
    judged = [i.semantic for i in items if i.semantic is not None]
    if judged and len(judged) == n:
        raw = _mean(judged)
        out["semantic_raw"] = raw
        out["semantic_accuracy"] = rogan_gladen(raw, calibration.q0, calibration.q1)
        out["semantic_accuracy_ci"] = list(rogan_gladen_ci(raw, n, calibration, level))
        out["judge_calls"] = sum(1 for i in items if i.semantic_source == "judge")
    else:
        out["semantic_raw"] = out["semantic_accuracy"] = out["semantic_accuracy_ci"] = None
        out["judge_calls"] = 0
    for scorer in registered_scorers():  # engine/eval/scorers.py; an item a scorer does not apply to is left out
        values = [i.scores.get(scorer.name) for i in items]
        values = [v for v in values if v is not None]
        if scorer.aggregate == "proportion":
            out[f"{scorer.name}_accuracy"], out[f"{scorer.name}_accuracy_ci"] = (
                _proportion([bool(v) for v in values], level) if values or len(items) == 0 else (None, None))
        else:
            out[f"{scorer.name}_accuracy"] = _mean([float(v) for v in values]) if values else None
            out[f"{scorer.name}_accuracy_ci"] = None
    for field in ("page_precision", "page_recall", "page_f1", "doc_precision", "doc_recall", "doc_f1"):
        out[field] = _mean([getattr(i, field) for i in items])
    efforts = [i.effort for i in items]
    correct = [i.correct for i in items]
    result = kuiper(efforts, correct)
    out["kuiper"] = result.statistic
    ci = None
    if bootstrap and result.statistic is not None:
        ci = kuiper_bootstrap_ci(efforts, correct, bootstrap, level, seed)
    out["kuiper_ci"] = list(ci) if ci else None
    out["kuiper_p_value"] = (kuiper_permutation_p(efforts, correct, bootstrap, seed)
                             if bootstrap and result.statistic is not None else None)
    out["kuiper_n"] = result.n
    out["kuiper_dropped"] = result.dropped
    out["kuiper_undefined"] = result.reason
    if detailed:
        out["kuiper_madqa"] = kuiper_madqa(efforts, correct)
        out["kuiper_curve"] = [{"effort": e, "k": k, "d": d} for e, k, d in result.curve]
        waste = wasted_effort(efforts, correct)
        out["wasted_effort_ratio"] = waste["ratio"]
        out["mean_steps_correct"] = waste["mean_steps_correct"]
        out["mean_steps_incorrect"] = waste["mean_steps_incorrect"]
    out["taxonomy"] = taxonomy_summary(i.taxonomy for i in items)
    return out


def breakdowns(items: Sequence[ItemResult], calibration: JudgeCalibration | None = None, level: float = 0.95) -> dict:
    """Per-group summaries by hop type, document category and domain (no bootstrap, no curve)."""
    out = {}
    for key in BREAKDOWN_KEYS:
        groups: dict[str, list[ItemResult]] = defaultdict(list)
        for item in items:
            groups[getattr(item, key)].append(item)
        out[key] = {name: summarize(group, calibration, bootstrap=0, level=level, detailed=False)
                    for name, group in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))}
    return out
