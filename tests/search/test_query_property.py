"""Property test: the indexed query engine returns exactly the pages a brute-force regex matcher returns.

1,000 generated queries (fixed seed) mixing AND, OR, NOT, parentheses, phrases with and
without slop, prefix and ? wildcards, over a random corpus.
"""

import random

from tests.pdfs import make_text_store
from tools.search import Searcher, build_index
from tools.search.reference import matches, token_string

VOCAB = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu 2019 2020 q3 10-k".split()


def _random_query(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth > 2 or roll < 0.35:
        word = rng.choice(VOCAB)
        style = rng.random()
        if style < 0.15:
            return word[: rng.randint(1, 3)] + "*"
        if style < 0.25 and len(word) > 2:
            i = rng.randrange(len(word))
            return word[:i] + "?" + word[i + 1:]
        return word
    if roll < 0.5:
        words = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(2, 3)))
        slop = f"~{rng.randint(0, 3)}" if rng.random() < 0.5 else ""
        return f'"{words}"{slop}'
    if roll < 0.6:
        return "NOT " + _random_query(rng, depth + 1)
    op = rng.choice([" ", " AND ", " OR "])
    left, right = _random_query(rng, depth + 1), _random_query(rng, depth + 1)
    text = f"{left}{op}{right}"
    return f"({text})" if rng.random() < 0.4 else text


def test_indexed_matching_equals_brute_force_regex_on_1000_queries(tmp_path):
    rng = random.Random(20261130)
    docs = {f"d{d}": [" ".join(rng.choices(VOCAB, k=rng.randint(0, 25))) for _ in range(10)] for d in range(12)}
    store = make_text_store(tmp_path / "c", docs)
    build_index(store)
    searcher = Searcher(tmp_path / "c", backend="reference")
    pages = [(d, p + 1, token_string(text)) for d in sorted(docs) for p, text in enumerate(docs[d])]
    nonempty = 0
    for _ in range(1000):
        query = _random_query(rng)
        node = searcher.parse(query)
        expected = {(d, p) for d, p, toks in pages if matches(node, toks)}
        got = {(h.document, h.page) for h in searcher.search(query, k=len(pages), snippets=False)}
        assert got == expected, f"query {query!r}: index {sorted(got - expected)} extra, {sorted(expected - got)} missing"
        nonempty += bool(expected) and len(expected) < len(pages)
    assert nonempty > 400, "generated queries should mostly be selective"
