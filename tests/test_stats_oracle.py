"""engine/eval/stats.py against scipy, the reference a reviewer would check our intervals and tests with.

stats.py is pure Python on purpose (importing scipy costs a second on every `dossier eval`), so scipy is
only a test dependency (the `dev` extra): these parity tests are why it is declared at all. Cases are
seeded random draws plus the edges (no successes, all successes, ties, n = 1).
"""

import math
import random

import pytest

from engine.eval.stats import mcnemar_exact, pearson_r, rank_average, spearman_rho, wilson_interval

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy is the oracle (pip install -e '.[dev]')")

TOLERANCE = 1e-9  # both sides are double-precision closed forms; only rounding differs


def _close(ours: float, theirs: float, what: str) -> None:
    assert math.isclose(ours, theirs, rel_tol=TOLERANCE, abs_tol=TOLERANCE), (
        f"{what}: ours {ours!r}, scipy {theirs!r}, difference {abs(ours - theirs):.3e}")


@pytest.mark.parametrize("level", [0.90, 0.95, 0.99])
def test_wilson_interval_matches_scipy(level):
    rng = random.Random(47)
    cases = [(0, 1), (1, 1), (0, 30), (30, 30), (1, 2), *((rng.randint(0, n), n) for n in rng.sample(range(2, 5000), 40))]
    for successes, n in cases:
        low, high = wilson_interval(successes, n, level)
        reference = scipy_stats.binomtest(successes, n).proportion_ci(confidence_level=level, method="wilson")
        _close(low, reference.low, f"Wilson low {successes}/{n} at {level}")
        _close(high, reference.high, f"Wilson high {successes}/{n} at {level}")


def test_exact_mcnemar_matches_scipy_binomial_test():
    rng = random.Random(48)
    cases = [(0, 0), (0, 1), (1, 0), (5, 5), (0, 25), (3, 40), *((rng.randint(0, 300), rng.randint(0, 300)) for _ in range(40))]
    for b, c in cases:
        reference = 1.0 if b + c == 0 else scipy_stats.binomtest(min(b, c), b + c, 0.5).pvalue
        _close(mcnemar_exact(b, c), reference, f"McNemar b={b} c={c}")


def test_ranks_and_correlations_match_scipy():
    rng = random.Random(49)
    for trial in range(30):
        n = rng.randint(3, 60)
        x = [rng.randint(0, 6) if trial % 2 else rng.random() for _ in range(n)]  # odd trials: many ties
        y = [v + rng.gauss(0, 2) for v in x]
        assert rank_average(x) == pytest.approx(list(scipy_stats.rankdata(x, method="average")), abs=0), f"ranks of {x}"
        _close(pearson_r(x, y), float(scipy_stats.pearsonr(x, y).statistic), f"Pearson, trial {trial}")
        _close(spearman_rho(x, y), float(scipy_stats.spearmanr(x, y).statistic), f"Spearman, trial {trial}")
