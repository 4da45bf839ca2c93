"""Classical-Test-Theory splits, as MADQA built its train/dev/test (Section 2.4, Appendix D).

From a systems x items matrix of 0/1 outcomes:
- difficulty p_j = mean outcome of item j over systems (low = hard);
- discrimination r_j = Pearson correlation, over systems, between the outcome on item j and
  the system's total on all *other* items (leave-one-out point-biserial); 0 variance -> NaN.
A split of size S is filled in this order:
1. sentinel pool: items with p_j <= 0.1, up to `sentinel_share` * S of them (hardest first,
   then most discriminating);
2. the rest from items with p_j > 0.1, stratified into 9 bins (0.1, 0.2], ..., (0.9, 1.0]:
   the budget is shared equally between bins (a bin with too few items passes its unused
   quota to the others; what an even share leaves over goes to the harder bins first), and
   each bin takes its most discriminating items first;
3. if that still falls short, more items with p_j <= 0.1.
The test split is chosen first, then dev from what is left; the rest is train. Bin edges are
compared after rounding to 9 decimals, so p = 0.3 lands in (0.2, 0.3] despite float error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.eval.stats import spearman_rho
from tools.errors import DossierError

__all__ = ["SplitConfig", "item_statistics", "select_split", "make_splits"]


@dataclass(slots=True, frozen=True)
class SplitConfig:
    """Sizes of the splits and the sentinel rule."""

    test_size: int  # items in the test split (MADQA: 500 of 2,250)
    dev_size: int  # items in the dev split (MADQA: 200)
    sentinel_share: float = 0.2  # share of each split reserved for sentinel items (MADQA: 100 of 500)
    sentinel_max_difficulty: float = 0.1  # items solved by at most this share of systems are sentinels
    bins: int = 9  # difficulty bins above the sentinel threshold

    def __post_init__(self) -> None:
        if self.test_size < 0 or self.dev_size < 0:
            raise DossierError(f"split sizes must be >= 0, got test={self.test_size}, dev={self.dev_size}")
        if not 0.0 <= self.sentinel_share <= 1.0:
            raise DossierError(f"sentinel share {self.sentinel_share} must lie between 0 and 1")
        if self.bins < 1:
            raise DossierError(f"need at least one difficulty bin, got {self.bins}")


def item_statistics(outcomes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Difficulty and leave-one-out point-biserial discrimination of every item.

    Args:
        outcomes: (systems, items) array of 0/1.

    Returns:
        (difficulty, discrimination), each of shape (items,); discrimination is NaN where
        either the item or the rest-score has no variance.
    """
    x = np.asarray(outcomes, dtype=np.float64)
    difficulty = x.mean(axis=0)
    rest = x.sum(axis=1, keepdims=True) - x  # (systems, items): each system's total without item j
    xc = x - difficulty
    rc = rest - rest.mean(axis=0)
    denominator = np.sqrt((xc**2).sum(axis=0) * (rc**2).sum(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        discrimination = np.where(denominator > 0, (xc * rc).sum(axis=0) / denominator, np.nan)
    return difficulty, discrimination


def _by_discrimination(indices, discrimination, difficulty, ids):
    # most discriminating first; NaN last; then harder first; then id for a stable, reproducible order
    return sorted(indices, key=lambda i: (np.isnan(discrimination[i]), -np.nan_to_num(discrimination[i]),
                                          difficulty[i], ids[i]))


def _is_sentinel(solved: int, n_systems: int, threshold: float) -> bool:
    # p <= threshold on counts, with a tolerance so 1 of 10 systems counts as p = 0.1 exactly
    return solved <= threshold * n_systems + 1e-9


def select_split(candidates: list[int], size: int, solved: np.ndarray, n_systems: int,
                 discrimination: np.ndarray, ids: list[str], config: SplitConfig) -> list[int]:
    """Pick `size` items from `candidates` (indices) by the sentinel + binned-discrimination rule."""
    size = min(size, len(candidates))
    difficulty = solved / n_systems
    threshold = config.sentinel_max_difficulty
    is_sentinel = {i: _is_sentinel(solved[i], n_systems, threshold) for i in candidates}
    pool = sorted((i for i in candidates if is_sentinel[i]),
                  key=lambda i: (difficulty[i], np.isnan(discrimination[i]), -np.nan_to_num(discrimination[i]), ids[i]))
    n_sentinel = min(len(pool), round(config.sentinel_share * size))
    chosen = pool[:n_sentinel]
    bins: dict[int, list[int]] = {b: [] for b in range(config.bins)}
    width = (1.0 - threshold) / config.bins
    for i in candidates:
        if not is_sentinel[i]:
            b = min(config.bins - 1, max(0, int(np.ceil(round((difficulty[i] - threshold) / width, 9))) - 1))
            bins[b].append(i)
    ranked = {b: _by_discrimination(items, discrimination, difficulty, ids) for b, items in bins.items()}
    quota = {b: 0 for b in bins}
    left = size - len(chosen)
    active = [b for b in bins if ranked[b]]
    while left > 0 and active:
        share, extra = divmod(left, len(active))
        for position, b in enumerate(active):
            give = min(share + (position < extra), len(ranked[b]) - quota[b])
            quota[b] += give
            left -= give
        active = [b for b in active if quota[b] < len(ranked[b])]
    for b in bins:
        chosen.extend(ranked[b][:quota[b]])
    if left > 0:
        chosen.extend(pool[n_sentinel:n_sentinel + left])
    return chosen


def make_splits(ids: list[str], outcomes: np.ndarray, systems: list[str], config: SplitConfig) -> dict:
    """Test, dev and train splits with item statistics and the ranking check.

    Args:
        ids: item ids, one per column of `outcomes`.
        outcomes: (systems, items) 0/1 matrix.
        systems: system names, one per row.
        config: split sizes.

    Returns:
        {"splits": {"test": [...], "dev": [...], "train": [...]}, "sentinel": [...], "items": [...],
         "spearman_rho": rho, "system_accuracy": {...}, "summary": {...}}
    """
    x = np.asarray(outcomes, dtype=np.int64)
    if x.ndim != 2 or x.shape != (len(systems), len(ids)):
        raise DossierError(f"outcome matrix has shape {x.shape}, expected ({len(systems)}, {len(ids)})")
    if len(systems) < 2:
        raise DossierError(f"CTT splits need results from at least 2 systems, got {len(systems)}")
    if config.test_size + config.dev_size > len(ids):
        raise DossierError(f"test ({config.test_size}) + dev ({config.dev_size}) exceed the {len(ids)} items")
    solved = x.sum(axis=0)
    difficulty, discrimination = item_statistics(x)
    everything = list(range(len(ids)))
    test = select_split(everything, config.test_size, solved, len(systems), discrimination, ids, config)
    in_test = set(test)
    rest = [i for i in everything if i not in in_test]
    dev = select_split(rest, config.dev_size, solved, len(systems), discrimination, ids, config)
    taken = set(test) | set(dev)
    train = [i for i in everything if i not in taken]
    split_of = {i: "test" for i in test} | {i: "dev" for i in dev} | {i: "train" for i in train}
    acc_all = x.mean(axis=1)
    acc_test = x[:, test].mean(axis=1) if test else np.zeros(len(systems))
    rho = spearman_rho(acc_test.tolist(), acc_all.tolist()) if test else None
    items = [{"id": ids[i], "difficulty": float(difficulty[i]),
              "discrimination": None if np.isnan(discrimination[i]) else float(discrimination[i]),
              "split": split_of[i], "sentinel": bool(split_of[i] == "test" and _is_sentinel(solved[i], len(systems),
                                                                      config.sentinel_max_difficulty))}
             for i in everything]
    return {
        "splits": {"test": [ids[i] for i in test], "dev": [ids[i] for i in dev], "train": [ids[i] for i in train]},
        "sentinel": [it["id"] for it in items if it["sentinel"]],
        "items": items,
        "spearman_rho": rho,
        "system_accuracy": {s: {"all": float(a), "test": float(t)} for s, a, t in zip(systems, acc_all, acc_test)},
        "summary": {name: {"n": len(idx), "mean_difficulty": float(difficulty[idx].mean()) if idx else None}
                    for name, idx in (("test", test), ("dev", dev), ("train", train), ("all", everything))},
    }
