"""Late-interaction reranking behind one interface, for `dossier search --rerank late` and the agent's search tool.

    reranker = LateReranker.open(corpus, "minilm")            # or a ColQwen/ColPali directory
    first = bm25_first_stage(Searcher(corpus))                 # (query, k) -> (rows, scores)
    result = reranker.search("3M capital expenditure 2018", first, k=5)   # HEAVEN two-stage
    pages = reranker.pages(result)                             # [(document, page, score), ...]
    hits = late_search_hits(searcher, reranker, query, k=5)    # SearchHits, as Searcher.search returns

`search` runs HEAVEN's two stages (heaven.py); `rerank` scores given candidates in one pass.
Rows are the BM25 index's page rows, which the embedding store shares.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tools.errors import DossierError
from tools.late.base import MultiVectorEncoder, QueryVectors
from tools.late.heaven import FirstStage, HeavenConfig, LateResult, exhaustive_search, heaven_search, rerank_candidates
from tools.late.store import EmbeddingStore

__all__ = ["LateReranker", "bm25_first_stage", "late_search_hits"]


class LateReranker:
    """A multi-vector encoder with its page embeddings, and the stage settings.

    Args:
        encoder: the encoder the embeddings were built with.
        store: the page embeddings (`tools.late.store.EmbeddingStore`).
        config: HEAVEN stage sizes and fusion weights.
    """

    def __init__(self, encoder: MultiVectorEncoder, store: EmbeddingStore, config: HeavenConfig | None = None):
        if store.meta.get("encoder") != encoder.name or store.meta.get("dim") != encoder.dim:
            raise DossierError(f"embeddings at {store.folder} were built by {store.meta.get('encoder')!r} "
                               f"(dim {store.meta.get('dim')}), not by {encoder.name!r} (dim {encoder.dim})")
        self.encoder = encoder
        self.store = store
        self.config = config or HeavenConfig()

    @classmethod
    def open(cls, corpus: str | Path, model: str = "minilm", *, device: str = "cpu",
             config: HeavenConfig | None = None) -> "LateReranker":
        """Load MODEL's encoder and the corpus's embeddings for it (`dossier index --late MODEL`).

        On `device="cuda"` the embeddings are copied to the GPU when they fit (`tools/placement.py`) and
        scored there by the fused Triton MaxSim kernel; otherwise they stay memory-mapped on the CPU.
        """
        from tools.late.index import load_encoder, open_late_store
        from tools.placement import fits_on_cuda

        store = open_late_store(corpus, model)
        if device == "cuda" and fits_on_cuda(store.nbytes, f"late-interaction embeddings ({store.folder})"):
            store = store.to_device("cuda")
        return cls(load_encoder(model, device), store, config)

    @property
    def page_rows(self) -> list[tuple[str, int]]:
        return [(d, p) for d, p in self.store.meta["page_rows"]]

    def encode(self, query: str) -> QueryVectors:
        """The query's vectors (pass them as `encoded=` to run several searches on one encoding)."""
        return self.encoder.encode_queries([query])[0]

    def search(self, query: str, first_stage: FirstStage, k: int = 5, *, config: HeavenConfig | None = None,
               encoded: QueryVectors | None = None) -> LateResult:
        """HEAVEN two-stage search over the first stage's candidates."""
        return heaven_search(query, first_stage, self.encoder, self.store, k, config or self.config, encoded)

    def rerank(self, query: str, rows: np.ndarray, first_scores: np.ndarray, k: int = 5,
               weight: float | None = None, encoded: QueryVectors | None = None) -> LateResult:
        """One pass: full MaxSim on `rows`, fused with the first-stage scores (weight: config.beta)."""
        weight = self.config.beta if weight is None else weight
        return rerank_candidates(query, rows, first_scores, self.encoder, self.store, k, weight,
                                 self.config.normalize, encoded)

    def exhaustive(self, query: str, k: int = 5, encoded: QueryVectors | None = None) -> LateResult:
        """Full MaxSim over every page (quality/cost reference)."""
        return exhaustive_search(query, self.encoder, self.store, k, encoded)

    def pages(self, result: LateResult) -> list[tuple[str, int, float]]:
        """(document, page, score) of a result, best first."""
        rows = self.page_rows
        return [(rows[r][0], rows[r][1], float(s)) for r, s in zip(result.rows.tolist(), result.scores.tolist())]


def bm25_first_stage(searcher, mode: str = "bag", document: str | None = None) -> FirstStage:
    """A first stage from a `tools.search.Searcher`: its BM25 hits (query language, filters) as page rows.

    Args:
        searcher: a `tools.search.Searcher` over the same corpus.
        mode: "bag" (free text) or "boolean" (the query language, e.g. for the agent's queries).
        document: restrict to one document id.
    """

    def first(query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        hits = searcher.search(query, k=k, document=document, mode=mode, snippets=False)
        rows = np.array([searcher.index.row_of[(h.document, h.page)] for h in hits], dtype=np.int64)
        return rows, np.array([h.score for h in hits], dtype=np.float32)

    return first


def late_search_hits(searcher, reranker: LateReranker, query: str, k: int = 5, *, mode: str = "bag",
                     document: str | None = None, snippets: bool = True) -> list:
    """`Searcher.search`'s result type, ranked by HEAVEN over the searcher's BM25 candidates.

    Drop-in for `dossier search --rerank late` and the agent's search tool: the query language,
    `document` filter and modes are the searcher's; scores are the fused late-interaction scores.
    """
    from tools.search.searcher import SearchHit, make_snippet
    from tools.search.tokenize import tokens

    result = reranker.search(query, bm25_first_stage(searcher, mode, document), k)
    words = set(tokens(query))
    hits = []
    for doc, page, score in reranker.pages(result):
        snippet = make_snippet(searcher.store.page(doc, page).text, words) if snippets else ""
        hits.append(SearchHit(doc, page, score, snippet))
    return hits
