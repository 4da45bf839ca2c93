"""The Whoosh-style query language: precedence, phrases, wildcards, and errors that show where."""

import pytest

from tools.search.query import And, Empty, Not, Or, Phrase, QuerySyntaxError, Term, Wildcard, bag_of_words, parse_query


def test_terms_are_anded_by_default_and_or_binds_loosest():
    assert parse_query("revenue 2019") == And((Term("revenue"), Term("2019")))
    assert parse_query("a1 OR b1 c1") == Or((Term("a1"), And((Term("b1"), Term("c1")))))
    assert parse_query("(a1 OR b1) c1") == And((Or((Term("a1"), Term("b1"))), Term("c1")))


def test_not_and_lowercase_operators_are_words():
    assert parse_query("revenue NOT forecast") == And((Term("revenue"), Not(Term("forecast"))))
    assert parse_query("NOT forecast") == Not(Term("forecast"))
    assert parse_query("revenue or income") == And((Term("revenue"), Term("income")))  # "or" is a stopword


def test_phrases_slop_and_compound_terms():
    assert parse_query('"net income"~3') == Phrase((Term("net"), Term("income")), 3)
    assert parse_query("10-K") == Phrase((Term("10"), Term("k")), 0)
    assert parse_query('"revenue"') == Term("revenue")
    assert parse_query("$1,577.00") == Term("1577")


def test_wildcards():
    assert parse_query("Rev*") == Wildcard("rev*")
    assert parse_query("colo?r") == Wildcard("colo?r")
    assert Wildcard("rev*").prefix == "rev"


def test_stopword_terms_are_neutral():
    assert parse_query("the AND revenue") == Term("revenue")
    assert isinstance(parse_query("the of"), Empty)
    assert isinstance(parse_query(""), Empty)


@pytest.mark.parametrize(
    "query, message, position",
    [
        ('"net income', "unclosed quote", 0),
        ("(revenue 2019", "unclosed parenthesis", 0),
        ("revenue AND", "expected a word", 11),
        ("OR income", "operator OR needs", 0),
        ("revenue )", "unmatched closing parenthesis", 8),
        ("revenue AND OR income", "operator OR needs", 12),
    ],
)
def test_syntax_errors_point_at_the_problem(query, message, position):
    with pytest.raises(QuerySyntaxError) as err:
        parse_query(query)
    assert message in str(err.value)
    assert err.value.position == position
    lines = str(err.value).splitlines()
    assert lines[1].strip() == query and lines[2].index("^") == position + 2


def test_bag_of_words_ors_every_token():
    assert bag_of_words("What was 3M revenue in 2018?") == Or((Term("what"), Term("3m"), Term("revenue"), Term("2018")))
