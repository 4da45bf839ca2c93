"""Kuiper under several effort measures, and how those measures agree (MADQA Appendix F.4, Tables 11-12).

MADQA's effort is the number of steps (search calls, else iterations); F.4 recomputes Kuiper with
effort as total tokens (input + output), generated tokens and execution time, and reports the
pairwise Spearman correlations between the measures. Here, per item:
  steps             `ItemResult.effort` (searches, else iterations; 0 means unknown);
  total_tokens      prediction "tokens": prefilled + cached + generated (the whole prompt read, and the output),
                    plus the trajectory's "child_tokens" (the same three counts for model calls of child
                    episodes, such as the rlm agent's llm_query sub-calls, that "tokens" leaves out);
  generated_tokens  prediction "tokens": generated, plus "child_tokens": generated;
  seconds           prediction "wall_s".
An item without a measure (no prediction, no "tokens" record, a non-numeric value, a "child_tokens"
without all three numbers) is left out of that measure and counted as `missing`; a value <= 0 is
dropped by Kuiper as for steps (`dropped`). An item whose trajectory has no "child_tokens" (no
trajectories given, a run written before the field existed, an agent without such children) is
measured by its prediction's "tokens" alone.
Kuiper is the tie-invariant statistic of engine/eval/metrics/kuiper.py, in items.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

from engine.datasets.formats import Prediction
from engine.eval.metrics.kuiper import kuiper
from engine.eval.stats import spearman_rho
from engine.eval.trajectories import Episode

__all__ = ["EFFORT_MEASURES", "measures_of", "effort_measures"]

EFFORT_MEASURES = ("steps", "total_tokens", "generated_tokens", "seconds")
_TOKEN_KEYS = ("prefilled", "cached", "generated")  # a "tokens" / "child_tokens" record's counts


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def measures_of(steps: int, prediction: Prediction | None, episode: Episode | None = None) -> dict[str, float | None]:
    """Every effort measure of one item (None where the prediction does not record it).

    Args:
        steps: the item's step effort (`ItemResult.effort`; 0 = unknown).
        prediction: the item's prediction, whose extra fields may hold "tokens" and "wall_s".
        episode: the item's trajectory, whose "child_tokens" (when present) add to the token measures.
    """
    extra = prediction.extra if prediction is not None else {}
    tokens = extra.get("tokens") if isinstance(extra.get("tokens"), dict) else {}
    parts = [_number(tokens.get(key)) for key in _TOKEN_KEYS]
    children = episode.child_tokens if episode is not None else None
    if children is not None:  # the children's model calls are effort too; a count we cannot read leaves it unknown
        parts = [None if own is None or (child := _number(children.get(key))) is None else own + child
                 for own, key in zip(parts, _TOKEN_KEYS)]
    return {
        "steps": float(steps) if steps and steps > 0 else None,
        "total_tokens": sum(parts) if all(p is not None for p in parts) else None,
        "generated_tokens": parts[2],
        "seconds": _number(extra.get("wall_s")),
    }


def effort_measures(rows: Sequence[tuple[dict[str, float | None], bool]]) -> dict:
    """Kuiper per effort measure and the Spearman correlation of every pair of measures.

    Args:
        rows: (measures_of(...), correct) per gold item.

    Returns:
        {"n": items, "measures": {name: {"kuiper", "n", "missing", "dropped", "undefined"}},
         "spearman": [{"a", "b", "rho", "n"}, ...]} — a pair's rho is over the items with both
        measures > 0; None when fewer than 3 such items or either side is constant.
    """
    out: dict = {"n": len(rows), "measures": {}, "spearman": []}
    for name in EFFORT_MEASURES:
        known = [(m[name], correct) for m, correct in rows if m[name] is not None]
        result = kuiper([v for v, _ in known], [c for _, c in known])
        out["measures"][name] = {"kuiper": result.statistic, "n": result.n, "missing": len(rows) - len(known),
                                 "dropped": result.dropped, "undefined": result.reason}
    for a, b in combinations(EFFORT_MEASURES, 2):
        pairs = [(m[a], m[b]) for m, _ in rows if (m[a] or 0) > 0 and (m[b] or 0) > 0]
        rho = spearman_rho([x for x, _ in pairs], [y for _, y in pairs]) if len(pairs) >= 3 else None
        out["spearman"].append({"a": a, "b": b, "rho": rho, "n": len(pairs)})
    return out
