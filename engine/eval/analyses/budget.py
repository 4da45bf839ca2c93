"""The accuracy-vs-budget curve and its saturating fit (Q-Guide, Appendix F).

Accuracy at round budgets T_max = 1..6 is fitted by least squares with
    acc(t) = A − B·e^(−k·t),
A the asymptote, B the gap it closes, k the rate. R² measures the fit. The saturation point t★
is where 90% of the attainable gain over a single pass is realised:
    A − acc(t★) = 0.1·(A − acc(1))  ⇔  e^(−k·t★) = 0.1·e^(−k)  ⇔  t★ = 1 + ln 10 / k.
(Q-Guide reports A ≈ 0.659, B ≈ 0.738, k ≈ 1.036, R² = 0.982, t★ ≈ 3.2.)

For a fixed k the model is linear in (A, B), so the fit solves that exactly and searches k
(a log grid, then golden-section refinement). Pure NumPy; no scipy import on `dossier eval`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["fit_saturating", "saturating"]

_K_RANGE = (1e-3, 50.0)  # rates searched; beyond 50 the curve is a step at t = 1


def saturating(t: float | np.ndarray, a: float, b: float, k: float):
    return a - b * np.exp(-k * np.asarray(t, dtype=np.float64))


def _solve(t: np.ndarray, y: np.ndarray, k: float) -> tuple[float, float, float]:
    """(A, B, sse) of the least-squares fit for a fixed k."""
    design = np.stack([np.ones_like(t), -np.exp(-k * t)], axis=1)  # (points, 2)
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ np.array([a, b])
    return float(a), float(b), float(residual @ residual)


def fit_saturating(budgets: Sequence[float], accuracies: Sequence[float]) -> dict:
    """Fit acc(t) = A − B·e^(−k·t).

    Args:
        budgets: the T_max values (at least 3 distinct).
        accuracies: accuracy at each budget, as fractions.

    Returns:
        {"A", "B", "k", "r2", "t_star", "fitted": [...], "marginal": [acc(t+1) − acc(t) from the fit]};
        k, t_star and r2 are None when the fit is undefined (fewer than 3 budgets, or a flat curve
        with no gain to explain), and with "falling": True when the best fit has B ≤ 0 (accuracy
        drops as the budget grows: not a saturating curve).
    """
    t = np.asarray(budgets, dtype=np.float64)
    y = np.asarray(accuracies, dtype=np.float64)
    if t.shape != y.shape:
        raise ValueError(f"{t.size} budgets but {y.size} accuracies")
    empty = {"A": None, "B": None, "k": None, "r2": None, "t_star": None, "fitted": [], "marginal": []}
    if len(set(t.tolist())) < 3:
        return empty
    total = float(((y - y.mean()) ** 2).sum())
    if float(np.ptp(y)) < 1e-12:  # flat: A is the level, nothing is gained, k is undefined
        return {**empty, "A": float(y.mean()), "B": 0.0, "fitted": [float(y.mean())] * len(y),
                "marginal": [0.0] * (len(y) - 1)}
    grid = np.exp(np.linspace(math.log(_K_RANGE[0]), math.log(_K_RANGE[1]), 400))
    errors = [_solve(t, y, k)[2] for k in grid]
    best = int(np.argmin(errors))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(80):  # golden section on the bracket around the best grid point
        left, right = high - ratio * (high - low), low + ratio * (high - low)
        if _solve(t, y, left)[2] < _solve(t, y, right)[2]:
            high = right
        else:
            low = left
    k = (low + high) / 2
    a, b, sse = _solve(t, y, k)
    exact = 1e-12 * total
    if sse <= exact and _solve(t, y, 0.8 * k)[2] <= exact:  # a step: a whole range of k fits exactly, and where
        low, high = _K_RANGE[0], k  # the search stopped was rounding (B 3.74e13 or 3.75e13 by CPU kind), so take
        for _ in range(200):  # the least steep k that fits to 1e-12 of the variance, a well-defined one
            middle = (low + high) / 2
            if _solve(t, y, middle)[2] <= exact:
                high = middle
            else:
                low = middle
        k = high
        a, b, sse = _solve(t, y, k)
    if b <= 0:  # accuracy falls with the budget: A − B·e^(−kt) with B ≤ 0 is no saturating gain, and its
        return {**empty, "falling": True}  # least-squares parameters are absurd (B ≈ −1e13 for one drop)
    fitted = saturating(t, a, b, k)
    order = np.argsort(t)
    marginal = [float(fitted[order[i + 1]] - fitted[order[i]]) for i in range(len(order) - 1)]
    return {"A": a, "B": b, "k": float(k), "r2": 1.0 - sse / total,
            "t_star": float(1.0 + math.log(10.0) / k) if b > 0 else None,
            "fitted": [float(v) for v in fitted], "marginal": marginal}
