"""Effort calibration: MADQA's Kuiper statistic, made independent of the order of tied efforts.

MADQA (Section 3.3): drop items with effort <= 0; sort by effort; with y_bar the mean
correctness, D_k = sum_{j<=k} (y_pi(j) - y_bar) for k = 0..N (D_0 = 0) and
K = max_k D_k - min_k D_k; undefined when all or none are correct. Effort is the number of
search calls, else the agent's iterations.

Sorting by effort leaves the order *within* a group of equal efforts arbitrary; MADQA's
harness keeps the file order, so its K changes when the file is shuffled (agents' efforts
are small integers: ties everywhere). Here D is evaluated only at boundaries between distinct
effort values (after all items of one effort have been added), which no ordering of ties can
change. Without ties every k is a boundary and K is MADQA's. D is computed in exact integer
arithmetic as N * D_k = N * C_k - k * C (C_k correct among the first k, C in total).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "KuiperResult",
    "effort_of",
    "kuiper",
    "kuiper_madqa",
    "kuiper_bootstrap_ci",
    "kuiper_permutation_p",
    "wasted_effort",
]


def effort_of(search_history: list | None, iterations: int | None) -> int:
    """MADQA's effort: the number of searches when a search history exists, else iterations (0 when absent)."""
    if search_history:
        return len(search_history)
    return int(iterations or 0)


@dataclass(slots=True, frozen=True)
class KuiperResult:
    """The statistic with what it was computed from."""

    statistic: float | None  # K, in items (not divided by N, as in MADQA's tables); None when undefined
    y_bar: float | None  # mean correctness of the kept items
    n: int  # items kept (effort > 0)
    dropped: int  # items dropped for effort <= 0
    curve: list[tuple[int, int, float]]  # (effort, items so far k, D_k) at each boundary, starting (0, 0, 0.0)
    reason: str | None = None  # why the statistic is undefined


def _effort_text(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _kept(efforts: Sequence[float], correct: Sequence[bool]) -> tuple[np.ndarray, np.ndarray, int]:
    if len(efforts) != len(correct):
        raise ValueError(f"efforts and correct differ in length: {len(efforts)} vs {len(correct)}")
    e = np.asarray(efforts, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    keep = e > 0
    return e[keep], y[keep], int((~keep).sum())


def kuiper(efforts: Sequence[float], correct: Sequence[bool]) -> KuiperResult:
    """Tie-invariant Kuiper statistic of correctness against effort.

    Args:
        efforts: effort per item (steps); items with effort <= 0 are dropped.
        correct: correctness per item.
    """
    e, y, dropped = _kept(efforts, correct)
    n = int(e.size)
    if n == 0:
        return KuiperResult(None, None, 0, dropped, [], "no item has effort > 0")
    total_correct = int(y.sum())
    if total_correct in (0, n):
        reason = "every item is correct" if total_correct == n else "no item is correct"
        return KuiperResult(None, total_correct / n, n, dropped, [], reason)
    values, group = np.unique(e, return_inverse=True)
    if values.size == 1:  # nothing to order by: MADQA reports Kuiper only for systems whose effort varies
        reason = f"every item has the same effort ({_effort_text(values[0])}); Kuiper needs two effort values"
        return KuiperResult(None, total_correct / n, n, dropped, [], reason)
    group_n = np.bincount(group, minlength=values.size).astype(np.int64)
    group_c = np.bincount(group, weights=y, minlength=values.size).astype(np.int64)
    k = np.cumsum(group_n)
    scaled = n * np.cumsum(group_c) - k * total_correct  # N * D at each boundary, exact
    high = max(0, int(scaled.max()))
    low = min(0, int(scaled.min()))
    curve = [(0, 0, 0.0)] + [(_effort_text(v), int(kk), float(s) / n) for v, kk, s in zip(values, k, scaled)]
    return KuiperResult((high - low) / n, total_correct / n, n, dropped, curve)


def kuiper_madqa(efforts: Sequence[float], correct: Sequence[bool]) -> float | None:
    """The published harness's value: stable sort by effort (ties keep input order), D at every k.

    Kept for comparison only; it depends on the order of tied items.
    """
    e, y, _ = _kept(efforts, correct)
    if e.size == 0 or y.all() or not y.any():
        return None
    order = np.argsort(e, kind="stable")
    residuals = y[order].astype(np.float64) - y.mean()
    path = np.cumsum(residuals)
    return float(path.max() - path.min())


def kuiper_bootstrap_ci(
    efforts: Sequence[float],
    correct: Sequence[bool],
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval for the tie-invariant K, resampling items with replacement.

    K depends only on how many items of each (effort, correct) cell there are, so a resample
    is one multinomial draw over those cells: exact and fast for any N. Resamples where every
    item (or none) is correct have no K and are skipped.

    Returns:
        (low, high), or None when K is undefined or fewer than 10 resamples defined it.
    """
    e, y, _ = _kept(efforts, correct)
    n = int(e.size)
    if n == 0 or y.all() or not y.any() or np.unique(e).size < 2:
        return None
    values, group = np.unique(e, return_inverse=True)
    cells = np.bincount(group * 2 + y.astype(np.int64), minlength=2 * values.size)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, cells / n, size=n_boot).astype(np.int64)  # (n_boot, 2 * groups)
    group_c = draws[:, 1::2]
    group_n = draws[:, 0::2] + group_c
    total_c = group_c.sum(axis=1)
    scaled = n * np.cumsum(group_c, axis=1) - np.cumsum(group_n, axis=1) * total_c[:, None]
    stat = (np.maximum(scaled.max(axis=1), 0) - np.minimum(scaled.min(axis=1), 0)) / n
    defined = stat[(total_c > 0) & (total_c < n)]
    if defined.size < 10:
        return None
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(defined, [tail, 1.0 - tail])
    return (float(low), float(high))


def kuiper_permutation_p(
    efforts: Sequence[float], correct: Sequence[bool], n_perm: int = 1000, seed: int = 0
) -> float | None:
    """How often effort-independent outcomes give a K at least as large: a permutation p-value.

    Shuffling correctness across items keeps each effort group's size and the total correct;
    the correct count per group is then one multivariate hypergeometric draw. A small p means
    accuracy really changes with effort; the percentile bootstrap interval of a range statistic
    sits above K when it does not, so read the two together.
    """
    e, y, _ = _kept(efforts, correct)
    n = int(e.size)
    observed = kuiper(e, y).statistic
    if observed is None:
        return None
    _, group = np.unique(e, return_inverse=True)
    sizes = np.bincount(group).astype(np.int64)
    rng = np.random.default_rng(seed)
    total_c = int(y.sum())
    group_c = rng.multivariate_hypergeometric(sizes, total_c, size=n_perm).astype(np.int64)  # (n_perm, groups)
    scaled = n * np.cumsum(group_c, axis=1) - np.cumsum(sizes)[None, :] * total_c
    stat = (np.maximum(scaled.max(axis=1), 0) - np.minimum(scaled.min(axis=1), 0)) / n
    # (1 + hits) / (1 + draws): never exactly 0, the usual Monte-Carlo permutation p-value
    return float((1 + np.sum(stat >= observed - 1e-12)) / (1 + n_perm))


def wasted_effort(efforts: Sequence[float], correct: Sequence[bool]) -> dict:
    """Mean effort when wrong / mean effort when right (items with effort > 0), as in MADQA's harness.

    > 1: the agent grinds on questions it fails; < 1: it fails fast. None when no item is right
    (the harness prints infinity) or none is wrong.
    """
    e, y, _ = _kept(efforts, correct)
    right, wrong = e[y], e[~y]
    mean_right = float(right.mean()) if right.size else None
    mean_wrong = float(wrong.mean()) if wrong.size else None
    ratio = mean_wrong / mean_right if mean_right and mean_wrong is not None else None
    return {"ratio": ratio, "mean_steps_correct": mean_right, "mean_steps_incorrect": mean_wrong,
            "n_correct": int(right.size), "n_incorrect": int(wrong.size)}
