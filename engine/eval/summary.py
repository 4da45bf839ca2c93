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
from engine.eval.report import Detail, ScorerFigure, Summary
from engine.eval.scorers import registered_scorers
from engine.eval.metrics.kuiper import kuiper, kuiper_bootstrap_ci, kuiper_madqa, kuiper_permutation_p, wasted_effort
from engine.eval.stats import wilson_interval
from engine.eval.taxonomy import taxonomy_summary

__all__ = ["summarize", "breakdowns", "judge_corrected", "BREAKDOWN_KEYS"]

BREAKDOWN_KEYS = ("hop_type", "category", "domain")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _proportion(flags: Sequence[bool], level: float) -> tuple[float, list[float]]:
    k = sum(1 for f in flags if f)
    return (k / len(flags) if flags else 0.0), list(wilson_interval(k, len(flags), level))


def judge_corrected(items: Sequence[ItemResult], calibration: JudgeCalibration, level: float):
    """(accuracy, interval, the judged items' raw share, "floor"/"ceiling"/None) of a judged group.

    Only the items the judge decided are corrected (Rogan-Gladen with the calibration's q0, q1); an
    item MADQA's first stage decided (an exact match scores 1; an empty answer, a refusal or an
    over-long answer 0) is counted as it is, since no judge error can have touched it. MADQA measures
    its judge the same way, "excluding the ~50% exact-match cases (where agreement is perfect by
    construction)". Pooling those zeros into the judge's raw share would let the correction move them.

    The interval is the judged part's Rogan-Gladen interval (test sample and calibration sample, Lee et
    al.) carried through the same weighting, so it is conditional on which items the first stage decided;
    with every item judged it is exactly `rogan_gladen_ci`. "floor": the judged raw share is below
    1 - q0, the share a judge with this specificity accepts among wholly wrong answers, so the corrected
    judged share is clipped at 0 and says only that it lies below what this judge can measure; "ceiling":
    above q1, clipped at 1.
    """
    n = len(items)
    judged = [i.semantic for i in items if i.semantic_source == "judge"]
    decided = sum(i.semantic for i in items if i.semantic_source != "judge")
    if not judged:  # the first stage decided every item: a plain proportion
        return decided / n, list(wilson_interval(round(decided), n, level)), None, None
    raw = _mean(judged)
    unclipped = (raw + calibration.q0 - 1.0) / (calibration.q0 + calibration.q1 - 1.0)
    clipped = "floor" if unclipped < 0.0 else "ceiling" if unclipped > 1.0 else None
    share = len(judged) / n
    low, high = rogan_gladen_ci(raw, len(judged), calibration, level)
    return ((decided + len(judged) * rogan_gladen(raw, calibration.q0, calibration.q1)) / n,
            [decided / n + share * low, decided / n + share * high], raw, clipped)


def summarize(
    items: Sequence[ItemResult],
    calibration: JudgeCalibration | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    detailed: bool = True,
) -> Summary:
    """The metrics of a group of items (`Summary.to_dict()` is their part of report.json).

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
    accuracy, accuracy_ci = _proportion([i.accurate for i in items], level)
    exact_match, exact_match_ci = _proportion([i.exact for i in items], level)
    semantic_raw = semantic_accuracy = semantic_accuracy_ci = semantic_judged_raw = semantic_clipped = None
    judge_calls = 0
    if n and all(i.semantic is not None for i in items):
        semantic_raw = _mean([i.semantic for i in items])
        judge_calls = sum(1 for i in items if i.semantic_source == "judge")
        (semantic_accuracy, semantic_accuracy_ci, semantic_judged_raw,
         semantic_clipped) = judge_corrected(items, calibration, level)
    scorers = {}
    for scorer in registered_scorers():  # engine/eval/scorers.py; an item a scorer does not apply to is left out
        values = [i.scores.get(scorer.name) for i in items]
        values = [v for v in values if v is not None]
        if scorer.aggregate == "proportion":
            scorers[scorer.name] = ScorerFigure(*(_proportion([bool(v) for v in values], level)
                                                  if values or len(items) == 0 else (None, None)))
        else:
            scorers[scorer.name] = ScorerFigure(_mean([float(v) for v in values]) if values else None, None)
    page_doc = {field: _mean([getattr(i, field) for i in items])
                for field in ("page_precision", "page_recall", "page_f1", "doc_precision", "doc_recall", "doc_f1")}
    efforts = [i.effort for i in items]
    correct = [i.correct for i in items]
    result = kuiper(efforts, correct)
    ci = None
    if bootstrap and result.statistic is not None:
        ci = kuiper_bootstrap_ci(efforts, correct, bootstrap, level, seed)
    p_value = (kuiper_permutation_p(efforts, correct, bootstrap, seed)
               if bootstrap and result.statistic is not None else None)
    detail = None
    if detailed:
        madqa = kuiper_madqa(efforts, correct)
        waste = wasted_effort(efforts, correct)
        detail = Detail(kuiper_madqa=madqa, kuiper_curve=[{"effort": e, "k": k, "d": d} for e, k, d in result.curve],
                        wasted_effort_ratio=waste["ratio"], mean_steps_correct=waste["mean_steps_correct"],
                        mean_steps_incorrect=waste["mean_steps_incorrect"])
    return Summary(
        n=n, n_with_prediction=sum(1 for i in items if i.has_prediction), accuracy=accuracy, accuracy_ci=accuracy_ci,
        mean_anls=_mean([i.anls for i in items]), exact_match=exact_match, exact_match_ci=exact_match_ci,
        semantic_raw=semantic_raw, semantic_accuracy=semantic_accuracy, semantic_accuracy_ci=semantic_accuracy_ci,
        semantic_judged_raw=semantic_judged_raw, semantic_clipped=semantic_clipped, judge_calls=judge_calls,
        scorers=scorers, **page_doc,
        kuiper=result.statistic, kuiper_ci=list(ci) if ci else None, kuiper_p_value=p_value, kuiper_n=result.n,
        kuiper_dropped=result.dropped, kuiper_undefined=result.reason, detail=detail,
        taxonomy=taxonomy_summary(i.taxonomy for i in items))


def breakdowns(items: Sequence[ItemResult], calibration: JudgeCalibration | None = None,
               level: float = 0.95) -> dict[str, dict[str, Summary]]:
    """Per-group summaries by hop type, document category and domain (no bootstrap, no curve)."""
    out = {}
    for key in BREAKDOWN_KEYS:
        groups: dict[str, list[ItemResult]] = defaultdict(list)
        for item in items:
            groups[getattr(item, key)].append(item)
        out[key] = {name: summarize(group, calibration, bootstrap=0, level=level, detailed=False)
                    for name, group in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))}
    return out
