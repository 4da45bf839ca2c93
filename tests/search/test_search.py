"""Search over a corpus: BM25 equals bm25s for the same tokens, Boolean semantics, snippets, errors."""

import math
import random

import numpy as np
import pytest

from tests.pdfs import make_text_store
from tools.errors import DossierError
from tools.search import Searcher, build_index, tokens
from tools.search.query import QuerySyntaxError

WORDS = ("revenue income net capital expenditure cash flow 2018 2019 q3 10-k $1,577 menu spaghetti "
         "form member fee notice water street memo warehouse").split()


def _random_store(tmp_path, n_docs=12, pages=8, seed=0):
    rng = random.Random(seed)
    docs = {f"doc{d:02d}": [" ".join(rng.choices(WORDS, k=rng.randint(0, 60))) for _ in range(pages)]
            for d in range(n_docs)}
    store = make_text_store(tmp_path / "c", docs)
    build_index(store)
    return store, docs


def test_bm25_scores_equal_bm25s_for_the_same_tokenization(tmp_path):
    import bm25s

    store, docs = _random_store(tmp_path)
    page_texts = [text for d in sorted(docs) for text in docs[d]]
    peer = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    peer.index([tokens(t) for t in page_texts], show_progress=False)
    searcher = Searcher(tmp_path / "c", backend="reference")
    rng = random.Random(1)
    worst = 0.0
    for _ in range(50):
        query = " ".join(rng.sample(WORDS, 3))
        expected = peer.get_scores([t for t in dict.fromkeys(tokens(query)) if t in peer.vocab_dict])
        hits = searcher.search(query, k=len(page_texts), mode="bag", snippets=False)
        assert hits, query
        for hit in hits:
            row = sorted(docs).index(hit.document) * 8 + hit.page - 1
            worst = max(worst, abs(hit.score - expected[row]))
        # every page with a positive bm25s score is returned
        assert len(hits) == int((expected > 0).sum())
    assert worst <= 1e-5, f"max |score - bm25s| = {worst}"


def test_lucene_bm25_by_hand(tmp_path):
    make_text_store(tmp_path / "c", {"d": ["apple apple pear", "pear plum", "kiwi"]})
    from tools.corpus import CorpusStore

    build_index(CorpusStore(tmp_path / "c"))
    hits = Searcher(tmp_path / "c", backend="reference").search("apple", k=3)
    n, df, tf, dl, avgdl, k1, b = 3, 1, 2, 3, 2.0, 1.5, 0.75
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))
    assert len(hits) == 1 and hits[0].page == 1
    assert hits[0].score == pytest.approx(expected, abs=1e-5)


def test_boolean_semantics_phrases_and_document_filter(tmp_path):
    make_text_store(tmp_path / "c", {
        "report": ["Net income rose in 2019.", "Capital expenditure was $1,577 million in 2018.",
                   "Income, net of taxes, fell."],
        "menu": ["Spaghetti with clams $18.00", "Net fishing income report"],
    })
    from tools.corpus import CorpusStore

    build_index(CorpusStore(tmp_path / "c"))
    s = Searcher(tmp_path / "c", backend="reference")
    pages = lambda q, **kw: sorted((h.document, h.page) for h in s.search(q, k=10, **kw))  # noqa: E731
    assert pages('"net income"') == [("report", 1)]
    assert pages('"net income"~1') == [("menu", 2), ("report", 1)]
    assert pages("income NOT report") == [("report", 1), ("report", 3)]
    assert pages("1577") == pages("$1,577.00") == [("report", 2)]
    assert pages("spag*") == [("menu", 1)]
    assert pages("income", document="menu") == [("menu", 2)]
    assert pages("NOT income") == [("menu", 1), ("report", 2)]
    assert pages("the") == []
    hit = s.search("capital expenditure", k=1)[0]
    assert "**Capital** **expenditure**" in hit.snippet
    with pytest.raises(QuerySyntaxError):
        s.search('"unclosed')
    with pytest.raises(DossierError, match="unknown document 'menus'"):
        s.search("income", document="menus")
    with pytest.raises(DossierError, match="k must be at least 1"):
        s.search("income", k=0)


def test_ranking_is_by_score_then_page_order(tmp_path):
    store, _ = _random_store(tmp_path)
    hits = Searcher(tmp_path / "c", backend="reference").search("revenue OR income", k=20)
    keys = [(-h.score, h.document, h.page) for h in hits]
    assert keys == sorted(keys)


def test_stale_index_is_detected_and_missing_index_explained(tmp_path):
    store, _ = _random_store(tmp_path)
    s = Searcher(tmp_path / "c", backend="reference")
    assert not s.stale
    make_text_store(tmp_path / "c", {"new": ["fresh page"]})
    assert Searcher(tmp_path / "c", backend="reference").stale
    make_text_store(tmp_path / "d", {"x": ["y"]})
    with pytest.raises(DossierError, match="no search index; run `dossier index"):
        Searcher(tmp_path / "d")


def test_index_is_memory_mapped(tmp_path):
    _random_store(tmp_path)
    s = Searcher(tmp_path / "c", backend="reference")
    assert isinstance(s.index.matrix.data, np.memmap) or isinstance(s.index.matrix.data.base, np.memmap)
    assert isinstance(s.index.positions.positions, np.memmap)


def test_the_index_read_without_bm25s_is_bm25s_own_load(tmp_path):
    """ScoreMatrix.load_bm25s_dir (the searcher's reader, no bm25s import) maps the arrays bm25s.BM25.load maps."""
    import bm25s

    from kernels.bm25 import ScoreMatrix

    _random_store(tmp_path)
    folder = tmp_path / "c" / "index" / "bm25"
    ours = ScoreMatrix.load_bm25s_dir(folder)
    theirs = ScoreMatrix.from_bm25s(bm25s.BM25.load(folder, mmap=True, load_vocab=False, show_progress=False))
    assert ours.num_docs == theirs.num_docs == 12 * 8 and ours.nonoccurrence is None is theirs.nonoccurrence
    for name in ("data", "indices", "indptr"):
        assert np.array_equal(getattr(ours, name), getattr(theirs, name)), name
        assert getattr(ours, name).dtype == getattr(theirs, name).dtype, name
