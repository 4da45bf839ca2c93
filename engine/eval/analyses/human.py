"""Human runs and human-vs-agent pairs (MADQA's human baseline, Section 5 and Appendix C.2).

A person's run from the search studio is an ordinary run directory (agent "human"), so every
metric of `dossier eval` applies; what this module adds is what MADQA reports for people next
to agents that used the same search tool:

- behaviour: searches per question (MADQA's effort), time per question (the prediction's
  `wall_s`: first shown -> submitted, for people; the episode's wall time, for agents), page
  views per question, and how questions ended (answered / "I can't find it" / skipped) with the
  accuracy over the questions not skipped;
- a profile of one system: accuracy, Page F1, searches per question, first-query hit rate (a
  gold page in the first result list), Kuiper, time per question — the rows `dossier eval
  compare` prints side by side for two systems, above the 2x2 table and Cohen's kappa.

- the condition of a human run: "oracle" when the studio showed the gold evidence pages first
  (`dossier studio --oracle`, MADQA's human oracle, 99.4 % in the paper), "search" otherwise, so
  that such a run is never read as a search result: `condition_note` heads its report and the
  compare table.

Every mean is over the gold items that have a prediction; items without one are counted in `n`
of the report, not here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from statistics import mean, median

from engine.datasets.formats import Prediction
from engine.eval.items import ItemResult
from engine.eval.stats import wilson_interval
from engine.eval.trajectories import Episode

__all__ = ["behaviour_summary", "behaviour_text", "condition_note", "profile", "profile_table", "PROFILE_ROWS"]

ORACLE_NOTE = "oracle condition: gold pages shown"  # what a report of an oracle-condition run says first


def _stats(values: Sequence[float]) -> tuple[float | None, float | None]:
    return (mean(values), median(values)) if values else (None, None)


def behaviour_summary(items: Sequence[ItemResult], predictions: dict[str, Prediction | None],
                      episodes: dict[str, Episode] | None, level: float = 0.95) -> dict:
    """Effort and time per question, and how questions ended.

    Args:
        items: the evaluation's item results (one per gold item).
        predictions: gold id -> its matched prediction (None when it has none).
        episodes: gold id -> its trajectory, when trajectories were given.
        level: confidence level of the accuracy interval.
    """
    searches, seconds, views = [], [], []
    finish: Counter = Counter()
    conditions: Counter = Counter()  # the studio's "condition" (search / oracle); absent for agents
    for item in items:
        prediction = predictions.get(item.id)
        if prediction is None:
            continue
        episode = (episodes or {}).get(item.id)
        searches.append(len(episode.searches) if episode is not None else len(prediction.search_history))
        wall = prediction.extra.get("wall_s")
        if isinstance(wall, (int, float)) and wall >= 0:
            seconds.append(float(wall))
        if isinstance(prediction.extra.get("page_views"), int):
            views.append(prediction.extra["page_views"])
        finish[str(prediction.extra.get("finish", "unknown"))] += 1
        if prediction.extra.get("condition") is not None:
            conditions[str(prediction.extra["condition"])] += 1
    searches_mean, searches_median = _stats(searches)
    time_mean, time_median = _stats(seconds)
    attempted = [i for i in items if predictions.get(i.id) is not None
                 and predictions[i.id].extra.get("finish") != "skipped"]
    correct = sum(1 for i in attempted if i.correct)
    return {
        "n": len(searches),
        "searches_per_question": searches_mean,
        "searches_median": searches_median,
        "time_per_question_s": time_mean,
        "time_median_s": time_median,
        "time_n": len(seconds),
        "page_views_per_question": mean(views) if views else None,
        "finish": dict(sorted(finish.items())),
        "accuracy_not_skipped": correct / len(attempted) if attempted else None,
        "accuracy_not_skipped_ci": list(wilson_interval(correct, len(attempted), level)),
        "n_not_skipped": len(attempted),
        # one condition for the whole run, "mixed" when predictions disagree, None when none names one
        "condition": (next(iter(conditions)) if len(conditions) == 1 else "mixed") if conditions else None,
        "conditions": dict(sorted(conditions.items())),
    }


def condition_note(behaviour: dict | None, short: bool = False) -> str | None:
    """What a report must say first about a run's condition: the oracle's, or a mix; None for search runs."""
    condition = (behaviour or {}).get("condition")
    if condition == "oracle":
        return f"{ORACLE_NOTE} (MADQA's human oracle: retrieval solved" + (
            "; its searches are not a search run's)" if short else
            ", a reading-comprehension ceiling, not comparable with search runs)")
    if condition == "mixed":
        counts = ", ".join(f"{k} {v}" for k, v in (behaviour.get("conditions") or {}).items())
        return f"mixed conditions ({counts}): some answers saw the gold pages; score each condition's run apart"
    return None


# (key in the profile, label, how to print it)
PROFILE_ROWS = (
    ("accuracy", "accuracy (ANLS* >= 0.5)", "pct"),
    ("page_f1", "Page F1", "num"),
    ("searches_per_question", "searches per question", "num2"),
    ("first_query_page_hit", "first search hit a gold page", "pct"),
    ("first_query_doc_hit", "first search hit a gold document", "pct"),
    ("kuiper", "Kuiper", "num2"),
    ("time_median_s", "time per question (median s)", "num1"),
    ("page_views_per_question", "page views per question", "num2"),
)


def profile(report: dict) -> dict:
    """The figures compared between two systems, read from an evaluation report (None where unknown)."""
    steps = report.get("steps") or {}
    first = steps.get("first_query") or {}
    behaviour = report.get("behaviour") or {}
    return {
        "n": report.get("n"),
        "accuracy": report.get("accuracy"),
        "accuracy_ci": report.get("accuracy_ci"),
        "page_f1": report.get("page_f1"),
        "searches_per_question": behaviour.get("searches_per_question"),
        "first_query_page_hit": first.get("page_hit_rate"),
        "first_query_doc_hit": first.get("doc_hit_rate"),
        "kuiper": report.get("kuiper"),
        "time_median_s": behaviour.get("time_median_s"),
        "page_views_per_question": behaviour.get("page_views_per_question"),
        "condition": behaviour.get("condition"),
    }


def behaviour_text(behaviour: dict) -> str | None:
    """One line for the terminal: searches and time per question, page views, how questions ended."""
    if not behaviour or not behaviour.get("n"):
        return None
    parts = [f"searches per question {behaviour['searches_per_question']:.2f} (median {behaviour['searches_median']:g})"]
    if behaviour.get("time_n"):
        parts.append(f"time per question median {behaviour['time_median_s']:.1f} s (mean {behaviour['time_per_question_s']:.1f} s)")
    if behaviour.get("page_views_per_question") is not None:
        parts.append(f"page views per question {behaviour['page_views_per_question']:.2f}")
    finish = {k: v for k, v in behaviour.get("finish", {}).items() if k != "unknown"}
    if finish:
        parts.append("ended: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in finish.items()))
    if finish.get("skipped") and behaviour.get("accuracy_not_skipped") is not None:
        low, high = behaviour["accuracy_not_skipped_ci"]
        parts.append(f"accuracy without the skipped {100 * behaviour['accuracy_not_skipped']:.1f}% "
                     f"[{100 * low:.1f}, {100 * high:.1f}] (n={behaviour['n_not_skipped']})")
    return " · ".join(parts)


def profile_table(name_a: str, a: dict, name_b: str, b: dict) -> list[str]:
    """Two systems' profiles as aligned text lines (a header, then one line per PROFILE_ROWS entry both know)."""
    def cell(value, how):
        if value is None:
            return "—"
        return {"pct": f"{100 * value:.1f}%", "num": f"{value:.3f}", "num2": f"{value:.2f}",
                "num1": f"{value:.1f}"}[how]

    rows = [(label, cell(a.get(key), how), cell(b.get(key), how)) for key, label, how in PROFILE_ROWS
            if a.get(key) is not None or b.get(key) is not None]
    width = max(len(label) for label, _, _ in rows)
    col = max(12, len(name_a) + 2, *(len(x) + 2 for _, x, _ in rows))
    lines = [f"{'':<{width}}  {'A ' + name_a:<{col + 2}}B {name_b}"]
    lines += [f"{label:<{width}}  {x:<{col + 2}}{y}" for label, x, y in rows]
    for side, name, figures in (("A", name_a, a), ("B", name_b, b)):
        note = condition_note({"condition": figures.get("condition")}, short=True)
        if note:  # an oracle run beside a search run: say what the gap measures
            lines.append(f"{side} {name}: {note}")
    return lines
