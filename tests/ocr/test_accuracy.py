"""Character accuracy: the bit-parallel edit distance equals the textbook DP; normalisation is documented."""

import random

from tools.ocr.accuracy import char_accuracy, edit_distance, normalize_text


def _dp(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def test_edit_distance_matches_dynamic_programming():
    rng = random.Random(7)
    for _ in range(500):
        a = "".join(rng.choice("abc d") for _ in range(rng.randint(0, 40)))
        b = "".join(rng.choice("abcde") for _ in range(rng.randint(0, 90)))  # longer than 64: multi-word masks
        assert edit_distance(a, b) == _dp(a, b), (a, b)


def test_normalisation_folds_layout_not_content():
    assert normalize_text("The  ﬁrst\n\n“quote” — here") == 'The first "quote" - here'
    assert char_accuracy("Total 1,577", "Total  1,577\n") == 1.0
    assert char_accuracy("Tota1 1,577", "Total 1,577") == 1 - 1 / 11
    assert char_accuracy("", "abc") == 0.0
