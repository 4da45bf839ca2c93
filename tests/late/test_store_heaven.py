"""Embedding store (fp16/int8 memmaps, resumable) and HEAVEN two-stage search over candidates only."""

import numpy as np
import pytest
import torch

from kernels.maxsim import maxsim_reference
from tools.errors import DossierError
from tools.late import (EmbeddingStore, EmbeddingStoreWriter, HeavenConfig, LateReranker, QueryVectors,
                        build_late_index, exhaustive_search, heaven_search)


def _pages(n: int, dim: int = 24, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.functional.normalize(torch.randn(int(length), dim, generator=gen), dim=-1)
            for length in torch.randint(0, 40, (n,), generator=gen)]


def _write(folder, pages, dtype):
    writer = EmbeddingStoreWriter(folder, encoder="test", dim=pages[0].shape[1], dtype=dtype,
                                  page_rows=[("d", i + 1) for i in range(len(pages))], flush_every=4)
    writer.append(pages)
    return writer.close()


@pytest.mark.parametrize("dtype,tol", [("float16", 2e-3), ("int8", 2e-2)])
def test_store_roundtrip_and_maxsim(tmp_path, dtype, tol):
    pages = _pages(30)
    store = _write(tmp_path / dtype, pages, dtype)
    assert isinstance(store.vectors, np.memmap) and store.num_pages == 30
    query = torch.nn.functional.normalize(torch.randn(7, 24), dim=-1)
    flat = torch.cat(pages)
    offsets = torch.tensor(store.offsets)
    exact = maxsim_reference(query, flat, offsets).numpy()
    got = store.maxsim(query)
    assert np.abs(got - exact).max() <= tol * np.abs(exact).max(), f"max diff {np.abs(got - exact).max():.3g}"
    ids = np.array([3, 0, 17])
    assert store.bytes_of(ids) == int(sum(len(pages[i]) for i in ids)) * store.bytes_per_vector


def test_interrupted_build_resumes(tmp_path):
    pages = _pages(20, seed=1)
    rows = [("d", i + 1) for i in range(20)]
    writer = EmbeddingStoreWriter(tmp_path / "s", encoder="test", dim=24, dtype="int8", page_rows=rows, flush_every=4)
    writer.append(pages[:10])  # progress saved after page 8; pages 9-10 are lost with the "crash"
    del writer
    with pytest.raises(DossierError, match="unfinished build"):
        EmbeddingStore.open(tmp_path / "s")
    again = EmbeddingStoreWriter(tmp_path / "s", encoder="test", dim=24, dtype="int8", page_rows=rows, flush_every=4)
    assert again.pages_done == 8
    again.append(pages[8:])
    resumed = again.close()
    straight = _write(tmp_path / "t", pages, "int8")
    assert np.array_equal(resumed.offsets, straight.offsets)
    assert np.array_equal(np.asarray(resumed.vectors), np.asarray(straight.vectors))


def _query(dim=24, n=6, seed=5):
    vectors = torch.nn.functional.normalize(torch.randn(n, dim, generator=torch.Generator().manual_seed(seed)), dim=-1)
    return QueryVectors(vectors, [f"t{i}" for i in range(n)], torch.tensor([True, False] * (n // 2)))


class _FixedEncoder:
    name, modality, dim = "test", "text", 24

    def __init__(self, query):
        self.query = query

    def encode_queries(self, texts):
        return [self.query for _ in texts]


def test_heaven_reads_only_candidates_and_reduces_to_maxsim(tmp_path):
    pages = _pages(400, seed=2)
    pages = [p if len(p) else torch.nn.functional.normalize(torch.ones(1, 24), dim=-1) for p in pages]
    store = _write(tmp_path / "h", pages, "float16")
    query = _query()
    candidates = np.array(sorted(np.random.default_rng(0).choice(400, 60, replace=False)))

    def first_stage(text, k):
        return candidates[:k], np.linspace(1, 0, len(candidates[:k])).astype(np.float32)

    # with no first-stage weight, all candidates kept and every query token: plain MaxSim over candidates
    plain = HeavenConfig(first_k=60, key_keep=60, alpha=0.0, beta=0.0, key_tokens=False, normalize="none")
    result = heaven_search("q", first_stage, _FixedEncoder(query), store, k=5, config=plain)
    full = store.maxsim(query.vectors, candidates)
    assert result.rows.tolist() == candidates[np.argsort(-full, kind="stable")[:5]].tolist()
    # default stages: cost is the candidates' bytes (key pass) + the kept pages' bytes (full pass)
    result = heaven_search("q", first_stage, _FixedEncoder(query), store, k=5, config=HeavenConfig(first_k=60,
                                                                                                    key_keep=15))
    assert result.pages_scored == {"first_stage": 60, "key": 60, "full": 15}
    assert set(result.rows) <= set(candidates)
    kept_bytes = result.bytes_read - store.bytes_of(candidates)
    assert 0 < kept_bytes <= store.bytes_of(candidates)
    assert result.bytes_read < exhaustive_search(query, _FixedEncoder(query), store).bytes_read / 3
    # pages outside the candidates are never read: poison them
    poisoned = EmbeddingStore(store.folder, np.array(store.vectors), None, store.offsets, store.meta)
    outside = np.setdiff1d(np.arange(400), candidates)
    for page in outside:
        poisoned.vectors[store.offsets[page]:store.offsets[page + 1]] = np.nan
    again = heaven_search("q", first_stage, _FixedEncoder(query), poisoned, k=5, config=HeavenConfig(first_k=60,
                                                                                                      key_keep=15))
    assert again.rows.tolist() == result.rows.tolist() and np.isfinite(again.scores).all()
    with pytest.raises(DossierError, match="alpha"):
        HeavenConfig(alpha=1.5)


def test_end_to_end_on_a_text_corpus(tmp_path, minilm):
    from tests.pdfs import make_text_store
    from tools.late import bm25_first_stage, late_search_hits
    from tools.search import Searcher, build_index

    docs = {
        "annual": ["Cash and cash equivalents at year end.", "Capital expenditures were 1,577 million in 2018.",
                   "Risk factors and legal proceedings."],
        "menu": ["Spaghetti, salad and soup of the day.", "Opening hours of the restaurant."],
    }
    store = make_text_store(tmp_path / "c", docs)
    build_index(store)
    stats = build_late_index(tmp_path / "c", "minilm", dtype="int8", encoder=minilm, batch_pages=2)
    assert stats["pages"] == 5 and stats["vectors"] > 20
    reranker = LateReranker(minilm, EmbeddingStore.open(tmp_path / "c" / "late" / "minilm"),
                            HeavenConfig(first_k=5, key_keep=3))
    searcher = Searcher(tmp_path / "c")
    result = reranker.search("How much did the company spend on capital expenditures in 2018?",
                             bm25_first_stage(searcher), k=3)
    assert reranker.pages(result)[0][:2] == ("annual", 2)
    hits = late_search_hits(searcher, reranker, "capital expenditures 2018", k=2, document="annual")
    assert [(h.document, h.page) for h in hits][0] == ("annual", 2) and "**" in hits[0].snippet
    assert all(h.document == "annual" for h in hits)
    with pytest.raises(DossierError, match="built by"):
        LateReranker(_FixedEncoder(_query()), reranker.store)
