"""The real Whoosh as the peer of `--retriever whoosh-compatible`, and the queries both are given.

`whoosh_index(store)` indexes a corpus store the way MADQA's harness does: one `TEXT` field
(StandardAnalyzer) per page, pages added in the store's order, one commit (one segment).
`parity_queries(texts, n, seed)` draws a mix of words, ANDs, ORs, NOTs, groupings, phrases
(with and without slop), prefixes and raw surface forms ("10-K", "$1,577") from the pages.
"""

from __future__ import annotations

import random

from tools.search.whoosh_index import whoosh_tokens

__all__ = ["whoosh_index", "whoosh_top", "parity_queries", "compare"]


def whoosh_index(store):
    from whoosh.fields import ID, STORED, TEXT, Schema
    from whoosh.filedb.filestore import RamStorage

    schema = Schema(document=ID(stored=True), page=STORED, content=TEXT)
    index = RamStorage().create_index(schema)
    writer = index.writer()
    for page in store.iter_pages():
        writer.add_document(document=page.document, page=page.page, content=page.text)
    writer.commit()
    return index


def whoosh_top(searcher, parser, query: str, k: int = 5) -> list[tuple[tuple[str, int], float]]:
    hits = searcher.search(parser.parse(query), limit=k)
    return [((hit["document"], hit["page"]), hit.score) for hit in hits]


def parity_queries(texts: list[str], n: int = 200, seed: int = 0) -> list[str]:
    """`n` queries over the page texts: every template of the query language, in fixed proportions."""
    rng = random.Random(seed)
    pages = [(text, whoosh_tokens(text)) for text in texts if len(whoosh_tokens(text)) >= 3]
    common = [t for t, _ in _counts(pages).most_common(40)]

    def word() -> str:
        return rng.choice(rng.choice(pages)[1])

    def run(length: int) -> list[str]:
        toks = rng.choice(pages)[1]
        start = rng.randrange(0, max(1, len(toks) - length))
        return toks[start:start + length]

    def raw(length: int) -> str:
        parts = rng.choice(pages)[0].split()
        start = rng.randrange(0, max(1, len(parts) - length))
        return " ".join(p.replace('"', "").replace("(", "").replace(")", "").replace("*", "").replace("?", "")
                        for p in parts[start:start + length])

    def prefix() -> str:
        long = [t for t in rng.choice(pages)[1] if len(t) >= 5 and t.isalpha()] or ["revenue"]
        w = rng.choice(long)
        return w[:rng.randint(3, 4)] + "*"

    templates = [
        lambda: word(),
        lambda: f"{word()} {word()}",
        lambda: " ".join(run(3)),
        lambda: f"{word()} OR {word()}",
        lambda: f"{word()} OR {word()} OR {word()}",
        lambda: f"{word()} {word()} OR {word()}",
        lambda: f"({word()} OR {word()}) {word()}",
        lambda: f"({word()} {word()}) OR {word()}",
        lambda: f"{word()} NOT {rng.choice(common)}",
        lambda: f"{word()} AND NOT {rng.choice(common)}",
        lambda: f"{word()} AND {word()}",
        lambda: f"NOT {rng.choice(common)} OR {word()}",
        lambda: '"' + " ".join(run(2)) + '"',
        lambda: '"' + " ".join(run(3)) + '"',
        lambda: '"' + " ".join(run(3)[::2]) + '"~2',
        lambda: '"' + " ".join(run(2)) + f'" {word()}',
        lambda: '"' + " ".join(run(2)) + f'" OR {word()}',
        lambda: prefix(),
        lambda: f"{prefix()} {word()}",
        lambda: raw(rng.randint(1, 3)),
        lambda: raw(rng.randint(4, 6)),
        lambda: f"{raw(1)} OR {raw(1)}",
    ]
    return [templates[i % len(templates)]() for i in range(n)]


def _counts(pages):
    from collections import Counter

    counts: Counter = Counter()
    for _, toks in pages:
        counts.update(set(toks))
    return counts


def compare(ours, whoosh_searcher, parser, queries: list[str], k: int = 5) -> tuple[float, list[dict]]:
    """Fraction of queries whose top-k page lists are identical, and the differing ones."""
    differing = []
    for query in queries:
        peer = whoosh_top(whoosh_searcher, parser, query, k)
        mine = [((h.document, h.page), h.score) for h in ours.search(query, k=k, snippets=False)]
        if [p for p, _ in peer] != [p for p, _ in mine]:
            differing.append({"query": query, "whoosh": peer, "ours": mine})
    return 1 - len(differing) / len(queries), differing



def whoosh_ast(query):
    """A parsed Whoosh query in our AST (Phrase.slop = Whoosh's slop - 1), to compare parsers."""
    from whoosh import query as wq

    from tools.search.query import And, Empty, Not, Or, Phrase, Term, Wildcard

    if query is wq.NullQuery:
        return Empty()
    if isinstance(query, wq.And):
        return And(tuple(whoosh_ast(q) for q in query.subqueries))
    if isinstance(query, wq.Or):
        return Or(tuple(whoosh_ast(q) for q in query.subqueries))
    if isinstance(query, wq.Not):
        return Not(whoosh_ast(query.query))
    if isinstance(query, wq.Phrase):
        return Phrase(tuple(Term(w) for w in query.words), query.slop - 1)
    if isinstance(query, wq.Prefix):
        return Wildcard(query.text + "*")
    if isinstance(query, wq.Wildcard):
        return Wildcard(query.text)
    if isinstance(query, wq.Term):
        return Term(query.text)
    raise AssertionError(f"no AST for {query!r}")
