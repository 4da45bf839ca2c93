"""Small exact statistics: Wilson intervals, exact McNemar, Cohen's kappa, Spearman and Pearson.

Pure Python (no scipy import: it costs a second of start-up on every `dossier eval`).
Q-Guide reports Wilson 95% intervals and a paired McNemar test; MADQA reports Cohen's kappa
between systems and Spearman's rho between rankings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

__all__ = [
    "z_value",
    "wilson_interval",
    "mcnemar_exact",
    "cohen_kappa",
    "rank_average",
    "spearman_rho",
    "pearson_r",
]


def z_value(level: float = 0.95) -> float:
    """Two-sided normal quantile: 1.959964 for 95%."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level} must be between 0 and 1")
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson_interval(successes: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion successes / n.

    Args:
        successes: number of successes (0 <= successes <= n).
        n: number of trials; n = 0 gives the uninformative interval (0, 1).
        level: confidence level.
    """
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} must lie between 0 and n = {n}")
    z = z_value(level)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # the bounds are exactly 0 (1) when no trial failed (succeeded); float error would leave 1e-17
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for the discordant counts b and c.

    Under the null each discordant pair goes either way with probability 1/2, so
    p = min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)]). No discordant pairs: p = 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    # exact integer arithmetic, then one division: no underflow for large n
    return min(1.0, 2.0 * tail / 2**n)


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's kappa between two raters' binary labels on the same items.

    Returns None when kappa is undefined (no items, or chance agreement is 1 because both
    raters gave one label to everything).
    """
    if len(a) != len(b):
        raise ValueError(f"kappa needs paired labels, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return None
    observed = sum(1 for x, y in zip(a, b) if bool(x) == bool(y)) / n
    pa = sum(1 for x in a if x) / n
    pb = sum(1 for y in b if y) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    if chance >= 1.0:
        return None
    return (observed - chance) / (1 - chance)


def rank_average(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def pearson_r(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson correlation; None when either side is constant or has fewer than 2 values."""
    if len(x) != len(y):
        raise ValueError(f"correlation needs paired values, got {len(x)} and {len(y)}")
    n = len(x)
    if n < 2:
        return None
    mx = sum(x) / n
    my = sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson on average ranks); None when undefined."""
    return pearson_r(rank_average(x), rank_average(y))
