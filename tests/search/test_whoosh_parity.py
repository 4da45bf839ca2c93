"""`retriever="whoosh-compatible"` against the real Whoosh (2.7.4, MADQA's harness search).

Whoosh indexes each page in one TEXT field (StandardAnalyzer) and ranks with BM25F; the
parity measure is the share of queries whose top-5 page lists are identical, order included.
One Whoosh behaviour is not reproduced: with a result limit its collector prunes by block
quality, and `AndMaybeMatcher.skip_to_quality` moves the required matcher without re-syncing
the optional one, so a page matching an OR inside an AND can lose that OR's score and drop
out of Whoosh's top 5 although its BM25F score belongs there (`limit=None` ranks it). We return
the exact ranking; the FinanceBench test checks that every difference is such a page.
"""

import random

import numpy as np
import pytest

from tests.pdfs import make_text_store
from tests.search.whoosh_peer import compare, parity_queries, whoosh_ast, whoosh_index, whoosh_top
from tools.search import Searcher, build_index
from tools.search.whoosh_query import parse_whoosh_query

whoosh = pytest.importorskip("whoosh", reason="the parity tests need the dev dependency whoosh==2.7.4")

SCORE_RTOL = 2e-6  # float32 storage of float64 BM25F contributions, summed over a few terms


def _synthetic_store(root, n_docs=30, pages=10, seed=3):
    """Pages of 0..600 tokens (lengths on both sides of Whoosh's length-byte steps), Zipf-like words."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(120)] + ("revenue income net capital expenditure cash flow 2018 2019 Q3 10-K "
                                             "$1,577.00 U.S. the of and a I x don't 3M FY2018 12.5% café naïve").split()
    weights = [1 / (i + 1) for i in range(len(vocab))]
    rng.shuffle(weights)
    docs = {f"doc{d:03d}": [" ".join(rng.choices(vocab, weights, k=rng.choice([0, 3, 11, 12, 40, rng.randint(0, 600)])))
                            for _ in range(pages)] for d in range(n_docs)}
    store = make_text_store(root, docs)
    build_index(store)
    return store


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from whoosh.qparser import QueryParser

    root = tmp_path_factory.mktemp("whoosh") / "c"
    store = _synthetic_store(root)
    index = whoosh_index(store)
    return store, Searcher(root, backend="reference", retriever="whoosh-compatible"), index, QueryParser("content", index.schema)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    from whoosh.qparser import QueryParser

    from engine.datasets.sample import write_sample_suite
    from tools.corpus import CorpusStore, IngestConfig, ingest

    root = tmp_path_factory.mktemp("sample")
    info = write_sample_suite(root / "s")
    ingest([info["pdfs"]], root / "corpus", IngestConfig(workers=1))
    store = CorpusStore(root / "corpus")
    build_index(store)
    index = whoosh_index(store)
    return store, Searcher(root / "corpus", backend="reference", retriever="whoosh-compatible"), index, \
        QueryParser("content", index.schema)


def _report(capsys, label: str, fraction: float, n: int) -> None:
    with capsys.disabled():
        print(f"\n{label}: identical top-5 page lists for {fraction:.3f} of {n} queries")


def test_length_quantisation_is_whooshs():
    from whoosh.util.numeric import byte_to_length, length_to_byte

    from kernels.bm25_whoosh import quantized_length

    for length in list(range(0, 3000)) + list(range(3000, 200_000, 97)):
        assert quantized_length(length) == byte_to_length(length_to_byte(length)), length


def test_scores_equal_whoosh_bm25f_page_by_page(synthetic):
    store, ours, index, parser = synthetic
    words = ["w0", "w5", "w17", "w63", "revenue", "q3", "u.s", "577.00", "café", "fy2018"]
    worst, diffs = 0.0, []
    with index.searcher() as searcher:
        for word in words:
            peer = dict(whoosh_top(searcher, parser, word, k=10_000))
            mine = {(h.document, h.page): h.score for h in ours.search(word, k=10_000, snippets=False)}
            assert mine.keys() == peer.keys(), word
            rel = [abs(mine[p] - s) / s for p, s in peer.items()]
            diffs += rel
            worst = max(worst, max(rel, default=0.0))
    assert worst <= SCORE_RTOL, f"BM25F differs from Whoosh: max rel {worst:.2e}, mean {np.mean(diffs):.2e}"


def test_parser_builds_whooshs_query_tree(synthetic):
    store, _, _, parser = synthetic
    cases = ["a b OR c", "NOT revenue OR income", "(revenue income) OR cash", "revenue revenue", '"net income"~3',
             "net-income OR cash", "10-K U.S. $1,577", "rev* AND NOT flow", "Rev?nue", '"cash flow', "(a OR b",
             "a) b", "OR revenue", "revenue NOT", "(NOT cash) income", '"the of"', "café naïve", "x AND y OR z",
             '"a b" OR c', "w1 w2 OR w3 w4", "NOT NOT w1"]
    texts = [page.text for page in store.iter_pages()]
    for query in cases + parity_queries(texts, 200, seed=5):
        if "NOT NOT" in query:
            continue  # Whoosh wraps the stray operator node; neither tree is meaningful
        assert parse_whoosh_query(query) == whoosh_ast(parser.parse(query)), query


def test_top5_equals_whoosh_on_a_synthetic_corpus(synthetic, capsys):
    store, ours, index, parser = synthetic
    queries = parity_queries([page.text for page in store.iter_pages()], 200, seed=1)
    with index.searcher() as searcher:
        fraction, differing = compare(ours, searcher, parser, queries)
    _report(capsys, "whoosh parity, synthetic corpus (300 pages)", fraction, len(queries))
    assert fraction >= 0.99, differing[:3]


def test_top5_equals_whoosh_on_the_sample_suite(sample, capsys):
    store, ours, index, parser = sample
    queries = parity_queries([page.text for page in store.iter_pages()], 200, seed=0)
    with index.searcher() as searcher:
        fraction, differing = compare(ours, searcher, parser, queries)
    _report(capsys, "whoosh parity, sample suite", fraction, len(queries))
    assert fraction >= 0.99, differing[:3]


def test_bag_of_words_is_an_or_of_the_tokens(synthetic):
    _, ours, index, _ = synthetic
    from whoosh.qparser import OrGroup, QueryParser

    parser = QueryParser("content", index.schema, group=OrGroup)
    with index.searcher() as searcher:
        for question in ["What was the revenue in FY2018 for 3M", "cash flow and capital expenditure of the U.S."]:
            peer = [p for p, _ in whoosh_top(searcher, parser, question)]
            assert [(h.document, h.page) for h in ours.search(question, k=5, mode="bag", snippets=False)] == peer


@pytest.mark.slow
@pytest.mark.shared
def test_top5_equals_whoosh_on_financebench(shared_dir, tmp_path, capsys):
    from whoosh.qparser import QueryParser

    from tools.corpus import CorpusStore, IngestConfig, ingest

    ingest([shared_dir / "data" / "financebench" / "pdfs"], tmp_path / "fb", IngestConfig(workers=2))
    store = CorpusStore(tmp_path / "fb")
    build_index(store)
    index = whoosh_index(store)
    parser = QueryParser("content", index.schema)
    ours = Searcher(tmp_path / "fb", retriever="whoosh-compatible")
    queries = parity_queries([page.text for page in store.iter_pages()], 200, seed=0)
    with index.searcher() as searcher:
        fraction, differing = compare(ours, searcher, parser, queries)
        # a difference must be Whoosh's pruning: its exhaustive ranking is ours
        unexplained = [d for d in differing if [p for p, _ in d["ours"]]
                       != [(h["document"], h["page"]) for h in searcher.search(parser.parse(d["query"]), limit=None)][:5]]
    exact = 1 - len(unexplained) / len(queries)
    _report(capsys, "whoosh parity, FinanceBench, Whoosh's default search (limit=5)", fraction, len(queries))
    _report(capsys, "whoosh parity, FinanceBench, Whoosh's exhaustive ranking (limit=None)", exact, len(queries))
    assert exact >= 0.99, unexplained[:3]
    assert fraction >= 0.98, differing[:3]


def test_the_whoosh_index_follows_a_rebuilt_default_index(tmp_path):
    from tools.errors import DossierError

    build_index(make_text_store(tmp_path / "c", {"a": ["revenue grew", "cash flow"]}))
    assert [h.page for h in Searcher(tmp_path / "c", retriever="whoosh-compatible").search("revenue")] == [1]
    store = make_text_store(tmp_path / "c", {"b": ["revenue fell"]})
    build_index(store)  # replaces CORPUS/index, the whoosh-compatible folder with it
    hits = Searcher(tmp_path / "c", retriever="whoosh-compatible").search("revenue")
    assert [(h.document, h.page) for h in hits] == [("a", 1), ("b", 1)]
    with pytest.raises(DossierError, match="unknown retriever 'whoosh'"):
        Searcher(tmp_path / "c", retriever="whoosh")
