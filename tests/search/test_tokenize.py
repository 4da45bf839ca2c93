"""The analyzer keeps the tokens that matter in documents (numbers, Q3, 10-K, $1,577)."""

from tools.search.tokenize import analyze, tokens


def test_numbers_are_whole_tokens_and_normalised():
    assert tokens("$1,577") == ["1577"]
    assert tokens("1,577.00 and 1577") == ["1577", "1577"]
    assert tokens("12.50% 3.14 0.5") == ["12.5", "3.14", "0.5"]
    assert tokens("2018.") == ["2018"]


def test_short_mixed_tokens_survive():
    assert tokens("Q3 3M FY2018") == ["q3", "3m", "fy2018"]
    assert tokens("10-K") == ["10", "k"]  # one-character tokens are kept (bm25s drops them)
    assert tokens("A B") == ["b"]  # "a" is an English stopword


def test_stopwords_removed_and_positions_renumbered():
    toks = list(analyze("Bank of America"))
    assert [(t.text, t.position) for t in toks] == [("bank", 0), ("america", 1)]
    assert toks[1].start == 8 and toks[1].end == 15


def test_unicode_and_case():
    assert tokens("Café NAÏVE") == ["café", "naïve"]
