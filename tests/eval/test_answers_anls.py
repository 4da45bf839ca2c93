"""ANLS* (official package), exact match and answer normalisation, with hand-computed values."""

import random

import pytest
from anls_star import anls_score

from engine.eval.metrics.anls import ANLSScorer, anls_star
from engine.eval.metrics.answers import (
    answer_parts,
    exact_match,
    is_empty_answer,
    is_refusal,
    levenshtein,
    levenshtein_within,
    normalize_for_match,
)

from . import madqa_reference


@pytest.mark.parametrize(
    ("answer", "variants", "expected"),
    [
        ("$1,577", [["$1,577"]], 1.0),
        ("REVENUE", [["revenue"]], 1.0),  # lower-cased like MADQA's harness
        ("ab", [["abc"]], pytest.approx(2 / 3)),  # 1 - 1/3
        ("abcdef", [["abcxyz"]], 0.5),  # exactly at the threshold: kept, not zeroed
        ("abcd", [["wxyz"]], 0.0),  # 1 - 4/4 < 0.5 -> 0
        ("ab", [["wxyz"], ["abc"]], pytest.approx(2 / 3)),  # best variant wins
        (["apple"], [["apple", "banana"]], 0.5),  # missing list item: (1 + 0) / 2
        (["apple", "banana", "cherry"], [["apple", "banana"]], pytest.approx(2 / 3)),  # extra item
        (["banana", "apple"], [["apple", "banana"]], 1.0),  # order does not matter
        (["apple", "bananas"], [["apple", "banana"]], pytest.approx((1 + 6 / 7) / 2)),
        ("", [["x"]], 0.0),  # empty answer
        (None, [["x"]], 0.0),  # no prediction
        ([], [["x"]], 0.0),
        ("x", [], 0.0),  # no gold variants
    ],
)
def test_anls_hand_computed(answer, variants, expected):
    assert anls_star(answer, variants) == expected


def test_scorer_matches_package_and_harness_on_random_answers():
    rng = random.Random(7)
    words = ["net income", "Q3", "$1,577", "alice smith", "yes", "no", "2019", "chicago il", "board"]
    scorer = ANLSScorer()
    for _ in range(300):
        answer = [rng.choice(words) for _ in range(rng.randint(1, 3))]
        variants = [[rng.choice(words) + rng.choice(["", "s", " inc"]) for _ in range(rng.randint(1, 3))]
                    for _ in range(rng.randint(1, 2))]
        expected = max(anls_score([g.lower() for g in v], [a.lower() for a in answer]) for v in variants)
        assert scorer(answer, variants) == pytest.approx(expected, abs=1e-12)
        assert scorer(answer, variants) == pytest.approx(madqa_reference.anls_star(answer, variants), abs=1e-12)


def test_shortcuts_never_change_a_score():
    # near-threshold pairs from a 3-letter alphabet: the exact and the provably-zero shortcuts must agree
    # with the package on every one
    rng = random.Random(5)
    scorer = ANLSScorer()
    for _ in range(1500):
        answer = ["".join(rng.choice("ab c") for _ in range(rng.randint(0, 7))) for _ in range(rng.randint(1, 3))]
        variants = [["".join(rng.choice("abc ") for _ in range(rng.randint(0, 7))) for _ in range(rng.randint(1, 3))]]
        expected = anls_score([g.lower() for g in variants[0]], [a.lower() for a in answer])
        assert scorer(answer, variants) == pytest.approx(expected, abs=1e-12), (answer, variants)
    assert 0 < scorer.package_calls < 1500  # the shortcuts did skip some calls


def test_package_argument_order_is_irrelevant_for_string_lists():
    # MADQA's harness calls anls_score(prediction, gold); the package's order is (gold, prediction).
    rng = random.Random(3)
    for _ in range(200):
        a = ["".join(rng.choice("abc ") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        b = ["".join(rng.choice("abc ") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        assert anls_score(a, b) == pytest.approx(anls_score(b, a), abs=1e-12)


def test_exact_shortcut_skips_the_package_and_cache_reuses_scores():
    scorer = ANLSScorer()
    assert scorer(["  Banana ", "apple"], [["apple", "banana"]]) == 1.0
    assert scorer.package_calls == 0
    assert scorer("abc", [["abd"]]) == pytest.approx(2 / 3)
    assert scorer("abc", [["abd"]]) == pytest.approx(2 / 3)
    assert scorer.package_calls == 1


def test_exact_match_normalisation_and_positions():
    assert exact_match(" $1,577. ", [["$1,577"]])
    assert exact_match("ＡＢＣ", [["abc"]])  # NFKC folds full-width letters
    assert exact_match(["a", "b"], [["A", "B"]])
    assert not exact_match(["b", "a"], [["a", "b"]])  # MADQA: equal in all positions
    assert not exact_match(["a"], [["a", "b"]])  # missing item
    assert not exact_match(["a", "b", "c"], [["a", "b"]])  # extra item
    assert not exact_match("", [[""]])  # an empty answer never matches
    assert not exact_match(None, [["x"]])
    assert normalize_for_match("  The   Answer!  ") == "the answer"


def test_answer_shapes_and_refusals():
    assert answer_parts(None) == [] and answer_parts("x") == ["x"] and answer_parts(["a", "b"]) == ["a", "b"]
    assert is_empty_answer(["", "  "]) and is_empty_answer("") and is_empty_answer(None)
    assert not is_empty_answer(["", "x"])
    for text in ("I cannot find this information.", "Unknown", "N/A", "unable to determine the value",
                 "The answer is not provided in the documents"):
        assert is_refusal(text), text
    for text in ("No", "Unknown Pleasures", "$1,577", "Not applicable rules apply to Section 3"):
        assert not is_refusal(text), text


def test_levenshtein():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
    assert levenshtein("abc", "abc") == 0


def test_bounded_levenshtein_agrees_with_the_full_one():
    rng = random.Random(2)
    for _ in range(2000):
        a = "".join(rng.choice("abc") for _ in range(rng.randint(0, 9)))
        b = "".join(rng.choice("abc") for _ in range(rng.randint(0, 9)))
        limit = rng.randint(0, 5)
        full = levenshtein(a, b)
        assert levenshtein_within(a, b, limit) == (full if full <= limit else None), (a, b, limit)
