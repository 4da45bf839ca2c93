"""Small bm25s indexes shared by the kernel tests (built once per session, ~0.3 s)."""

import numpy as np
import pytest


def zipf_corpus(num_docs: int, vocab: int, seed: int) -> list[list[str]]:
    """Pre-tokenized pages: Zipf word frequencies, lengths 3..80 (so ties and misses happen)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocab + 1)
    weights /= weights.sum()
    return [[f"w{t}" for t in rng.choice(vocab, size=rng.integers(3, 80), p=weights)] for _ in range(num_docs)]


def build_bm25s(corpus: list[list[str]], method: str = "lucene"):
    import bm25s

    retriever = bm25s.BM25(method=method)
    retriever.index(corpus, show_progress=False)
    return retriever


@pytest.fixture(scope="session")
def small_bm25s():
    """(retriever, corpus) over 3,000 pages and a 400-word Zipf vocabulary."""
    corpus = zipf_corpus(3000, 400, seed=7)
    return build_bm25s(corpus), corpus


def random_queries(retriever, n: int, seed: int, max_len: int = 6) -> list[np.ndarray]:
    """Token-id queries of 1..max_len words, repeats allowed, drawn uniformly from the vocabulary."""
    rng = np.random.default_rng(seed)
    # bm25s adds an empty-string token whose id lies past the matrix (it has no postings column)
    vocab = [i for w, i in retriever.vocab_dict.items() if w != ""]
    return [rng.choice(vocab, size=rng.integers(1, max_len + 1)).astype(np.int64) for _ in range(n)]
