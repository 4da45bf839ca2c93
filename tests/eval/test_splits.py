"""CTT splits: difficulty, leave-one-out point-biserial discrimination, sentinels, bins, Spearman."""

import math

import numpy as np
import pytest

from engine.eval.splits import SplitConfig, item_statistics, make_splits
from tools.errors import DossierError

# 4 systems (rows) x 5 items; system totals 4, 3, 2, 1
MATRIX = np.array([
    [1, 1, 1, 1, 0],
    [1, 1, 1, 0, 0],
    [1, 1, 0, 0, 0],
    [1, 0, 0, 0, 0],
])
IDS = ["i0", "i1", "i2", "i3", "i4"]


def test_item_statistics_hand_computed():
    difficulty, discrimination = item_statistics(MATRIX)
    assert difficulty.tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]
    # i1: outcome 1 1 1 0 against rest-scores 3 2 1 1 -> .75 / sqrt(.75 * 2.75)
    assert discrimination[1] == pytest.approx(0.75 / math.sqrt(0.75 * 2.75))
    assert discrimination[2] == pytest.approx(1 / math.sqrt(2))  # 1 1 0 0 against 3 2 2 1
    assert discrimination[3] == pytest.approx(0.75 / math.sqrt(0.75 * 2.75))  # 1 0 0 0 against 3 3 2 1
    assert math.isnan(discrimination[0]) and math.isnan(discrimination[4])  # no variance


def test_small_split_hand_worked():
    result = make_splits(IDS, MATRIX, ["s1", "s2", "s3", "s4"], SplitConfig(test_size=3, dev_size=1,
                                                                            sentinel_share=0.34))
    # sentinel: i4 (p = 0); two more from bins: one each for the two hardest non-empty bins (i3, then i2)
    assert result["splits"] == {"test": ["i4", "i3", "i2"], "dev": ["i1"], "train": ["i0"]}
    assert result["sentinel"] == ["i4"]
    # accuracy on test: .667 .333 0 0 against all items .8 .6 .4 .2 -> rho = 4.5 / sqrt(4.5 * 5)
    assert result["spearman_rho"] == pytest.approx(4.5 / math.sqrt(22.5))
    assert result["summary"]["test"]["mean_difficulty"] == pytest.approx(0.25)


def test_realistic_split_properties():
    rng = np.random.default_rng(0)
    ability = np.linspace(-1.5, 1.5, 12)[:, None]
    hardness = rng.normal(0.0, 1.5, size=(1, 300))
    outcomes = (rng.random((12, 300)) < 1 / (1 + np.exp(-(ability - hardness) * 2))).astype(int)
    ids = [f"q{j:03d}" for j in range(300)]
    config = SplitConfig(test_size=60, dev_size=30)
    result = make_splits(ids, outcomes, [f"s{i}" for i in range(12)], config)
    test, dev, train = (set(result["splits"][k]) for k in ("test", "dev", "train"))
    assert len(test) == 60 and len(dev) == 30 and len(train) == 210
    assert not (test & dev) and not (test & train) and not (dev & train)
    stats = {item["id"]: item for item in result["items"]}
    assert len(result["sentinel"]) == 12  # 20% of 60, all with p <= 0.1
    assert all(stats[i]["difficulty"] <= 0.1 for i in result["sentinel"])
    # within each difficulty bin, no unselected non-sentinel item discriminates better than a selected one
    for low in np.arange(0.1, 1.0, 0.1):
        in_bin = [it for it in result["items"] if low + 1e-9 < it["difficulty"] <= low + 0.1 + 1e-9]
        chosen = [it["discrimination"] for it in in_bin if it["split"] == "test" and it["discrimination"] is not None]
        others = [it["discrimination"] for it in in_bin if it["split"] != "test" and it["discrimination"] is not None]
        if chosen and others:
            assert min(chosen) >= max(others) - 1e-12
    assert result["spearman_rho"] > 0.85  # the test split ranks systems like the full set
    again = make_splits(ids, outcomes, [f"s{i}" for i in range(12)], config)
    assert again["splits"] == result["splits"]  # deterministic


def test_split_errors():
    with pytest.raises(DossierError, match="at least 2 systems"):
        make_splits(IDS, MATRIX[:1], ["s1"], SplitConfig(1, 1))
    with pytest.raises(DossierError, match="exceed"):
        make_splits(IDS, MATRIX, ["a", "b", "c", "d"], SplitConfig(4, 2))
    with pytest.raises(DossierError):
        SplitConfig(test_size=-1, dev_size=0)
