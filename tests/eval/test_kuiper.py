"""Kuiper statistic: hand-computed values, tie invariance, equality with MADQA's formula without ties."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.eval.metrics.kuiper import effort_of, kuiper, kuiper_bootstrap_ci, kuiper_madqa, kuiper_permutation_p, wasted_effort

from . import madqa_reference


def test_tie_free_hand_computed():
    # y = 1 1 0 1 0, mean .6: residuals .4 .4 -.6 .4 -.6 -> D = .4 .8 .2 .6 0; with D_0 = 0: K = .8 - 0
    result = kuiper([1, 2, 3, 4, 5], [1, 1, 0, 1, 0])
    assert result.statistic == pytest.approx(0.8)
    assert result.y_bar == pytest.approx(0.6) and result.n == 5 and result.dropped == 0
    assert [round(d, 6) for _, _, d in result.curve] == [0.0, 0.4, 0.8, 0.2, 0.6, 0.0]
    assert kuiper_madqa([1, 2, 3, 4, 5], [1, 1, 0, 1, 0]) == pytest.approx(0.8)


def test_ties_collapse_to_boundaries_where_the_harness_depends_on_order():
    # efforts 1 1 2 3, y 1 0 1 0, mean .5. Boundaries: after effort 1: 1 - 2*.5 = 0; after 2: .5; after 3: 0.
    assert kuiper([1, 1, 2, 3], [1, 0, 1, 0]).statistic == pytest.approx(0.5)
    assert kuiper([1, 1, 2, 3], [0, 1, 1, 0]).statistic == pytest.approx(0.5)
    # the published harness walks the tie in file order: D = .5 0 .5 0 -> .5, or -.5 0 .5 0 -> 1.0
    assert kuiper_madqa([1, 1, 2, 3], [1, 0, 1, 0]) == pytest.approx(0.5)
    assert kuiper_madqa([1, 1, 2, 3], [0, 1, 1, 0]) == pytest.approx(1.0)


def test_all_correct_all_wrong_and_no_effort_are_undefined():
    assert kuiper([1, 2, 3], [1, 1, 1]).statistic is None
    assert kuiper([1, 2, 3], [1, 1, 1]).reason == "every item is correct"
    assert kuiper([1, 2, 3], [0, 0, 0]).reason == "no item is correct"
    empty = kuiper([0, 0, -1], [1, 0, 1])
    assert empty.statistic is None and empty.dropped == 3 and empty.n == 0
    assert kuiper_bootstrap_ci([1, 2, 3], [1, 1, 1]) is None
    assert kuiper_permutation_p([1, 2, 3], [0, 0, 0]) is None


def test_effort_zero_items_are_dropped():
    # the effort-0 item would change the mean if kept: kept items 1 2 3 with y 1 0 0 -> mean 1/3
    result = kuiper([0, 1, 2, 3], [1, 1, 0, 0])
    assert result.dropped == 1 and result.n == 3
    assert result.statistic == pytest.approx(2 / 3)  # D = 2/3, 1/3, 0


def test_a_single_effort_value_is_undefined_not_zero():
    # a non-agentic system (fixed budget) has nothing to order by; MADQA reports no Kuiper for it
    result = kuiper([4, 4, 4, 4], [1, 0, 1, 0])
    assert result.statistic is None and "same effort (4)" in result.reason
    assert kuiper_bootstrap_ci([4, 4, 4, 4], [1, 0, 1, 0]) is None
    assert kuiper_permutation_p([4, 4, 4, 4], [1, 0, 1, 0]) is None


def test_effort_of_follows_madqa():
    assert effort_of(["q1", "q2"], 7) == 2  # searches first
    assert effort_of([], 7) == 7  # else iterations
    assert effort_of(None, None) == 0


tie_heavy = st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(tie_heavy, st.randoms(use_true_random=False))
def test_property_kuiper_is_the_same_for_every_ordering_of_ties(pairs, rnd):
    efforts = [e for e, _ in pairs]
    correct = [c for _, c in pairs]
    shuffled = pairs[:]
    rnd.shuffle(shuffled)
    a = kuiper(efforts, correct).statistic
    b = kuiper([e for e, _ in shuffled], [c for _, c in shuffled]).statistic
    assert a == b  # exact: integer arithmetic


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=60), st.randoms(use_true_random=False))
def test_property_equals_madqa_definition_without_ties(correct, rnd):
    efforts = list(range(1, len(correct) + 1))
    rnd.shuffle(efforts)  # distinct efforts in any file order
    ours = kuiper(efforts, correct).statistic
    theirs = madqa_reference.kuiper(efforts, correct)
    if theirs is None:
        assert ours is None
    else:
        assert ours == pytest.approx(theirs, abs=1e-9)
        assert kuiper_madqa(efforts, correct) == pytest.approx(theirs, abs=1e-12)


def test_bootstrap_interval_is_seeded_and_brackets_a_strong_effect():
    rng = random.Random(0)
    efforts = [rng.randint(1, 10) for _ in range(400)]
    correct = [rng.random() < (0.9 if e <= 3 else 0.3) for e in efforts]  # accuracy falls with effort
    k = kuiper(efforts, correct).statistic
    low, high = kuiper_bootstrap_ci(efforts, correct, n_boot=500, seed=1)
    assert kuiper_bootstrap_ci(efforts, correct, n_boot=500, seed=1) == (low, high)
    assert low < k < high and low > 20
    assert kuiper_permutation_p(efforts, correct, n_perm=500) < 0.01


def test_permutation_p_is_large_without_effort_dependence():
    rng = random.Random(5)
    efforts = [rng.randint(1, 8) for _ in range(400)]
    correct = [rng.random() < 0.5 for _ in efforts]
    assert kuiper_permutation_p(efforts, correct, n_perm=300) > 0.05


def test_wasted_effort_ratio_hand_computed():
    waste = wasted_effort([1, 2, 3, 4, 5, 0], [1, 1, 0, 1, 0, 0])
    assert waste["mean_steps_correct"] == pytest.approx(7 / 3)
    assert waste["mean_steps_incorrect"] == pytest.approx(4.0)
    assert waste["ratio"] == pytest.approx(12 / 7)
    assert waste["n_incorrect"] == 2  # the effort-0 item is left out
    assert wasted_effort([1, 2], [0, 0])["ratio"] is None  # nothing right: the harness prints infinity
