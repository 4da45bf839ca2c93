"""HEAVEN-style two-stage late-interaction search, candidates gathered before any MaxSim.

HEAVEN (Kim et al. 2025; MADQA appendix G.3, "Baseline 3"): a single-vector first stage
retrieves k1 = 200 pages; a multi-vector model re-ranks them, first scoring with only the
query's key (noun) tokens, then with the full query on the best ρ·k1 = 50; stage weights
α = 0.1, β = 0.3. Our reading, with every step over candidates only:

    rows, s1 = first_stage(query, first_k)                  # BM25 or any single-vector model
    s_key    = MaxSim(query key tokens, rows)               # cheap pass: fewer query vectors
    f1       = α·norm(s1) + (1-α)·norm(s_key)               # keep the best `key_keep`
    s_full   = MaxSim(all query tokens, kept rows)
    final    = β·norm(f1) + (1-β)·norm(s_full)              # top k

`norm` is min-max over the stage's candidates (BM25 and MaxSim live on different scales), or
identity. Cost is proportional to the candidates: the embedding bytes read are those of the
first_k pages (key pass) plus the key_keep pages (full pass), reported in `bytes_read`, against
every page's bytes for exhaustive MaxSim (`exhaustive_search`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from tools.errors import DossierError
from tools.late.base import MultiVectorEncoder, QueryVectors
from tools.late.store import EmbeddingStore

__all__ = ["HeavenConfig", "LateResult", "heaven_search", "exhaustive_search", "rerank_candidates", "FirstStage"]

FirstStage = Callable[[str, int], tuple[np.ndarray, np.ndarray]]  # (query, k) -> (rows int64, scores float32)


@dataclass(slots=True, frozen=True)
class HeavenConfig:
    """Two-stage search settings (defaults: HEAVEN's paper defaults as MADQA ran them)."""

    first_k: int = 200  # pages taken from the first stage (HEAVEN's k1)
    key_keep: int = 50  # pages kept after the key-token pass (ρ·k1, ρ = 0.25)
    alpha: float = 0.1  # weight of the first-stage score when fusing with the key-token MaxSim
    beta: float = 0.3  # weight of the key-pass fused score when fusing with the full MaxSim
    normalize: str = "minmax"  # per-stage score normalisation over the candidates: "minmax" or "none"
    key_tokens: bool = True  # False: the first pass uses every query token (ablation)

    def __post_init__(self) -> None:
        if self.first_k < 1 or self.key_keep < 1:
            raise DossierError(f"first_k and key_keep must be >= 1, got {self.first_k}, {self.key_keep}")
        for name in ("alpha", "beta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise DossierError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.normalize not in ("minmax", "none"):
            raise DossierError(f"normalize must be 'minmax' or 'none', got {self.normalize!r}")


@dataclass(slots=True)
class LateResult:
    """Ranked pages (BM25 row ids = embedding page ids) and what it cost."""

    rows: np.ndarray  # (k,) int64, best first
    scores: np.ndarray  # (k,) float32 final fused scores
    bytes_read: int = 0  # embedding bytes the MaxSim passes read
    pages_scored: dict = field(default_factory=dict)  # pages per pass, e.g. {"key": 200, "full": 50}


def _norm(scores: np.ndarray, how: str) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if how == "none" or len(scores) == 0:
        return scores
    lo, hi = scores.min(), scores.max()
    return np.zeros_like(scores) if hi <= lo else (scores - lo) / (hi - lo)


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best, ties broken by position (= first-stage rank)."""
    return np.lexsort((np.arange(len(scores)), -scores))[:k]


def heaven_search(query: str, first_stage: FirstStage, encoder: MultiVectorEncoder, store: EmbeddingStore,
                  k: int = 5, config: HeavenConfig | None = None, encoded: QueryVectors | None = None) -> LateResult:
    """Two-stage search (see module docstring).

    Args:
        query: the query text.
        first_stage: (query text, k) -> (rows, scores) from BM25 or a single-vector model.
        encoder: the multi-vector encoder the store was built with.
        store: the page embeddings.
        k: pages to return.
        config: stage sizes and weights.
        encoded: the query's vectors when already encoded (else the encoder encodes `query`).
    """
    config = config or HeavenConfig()
    rows, first = first_stage(query, config.first_k)
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return LateResult(np.zeros(0, np.int64), np.zeros(0, np.float32))
    encoded = encoded or encoder.encode_queries([query])[0]
    weights = encoded.key_mask.float() if config.key_tokens else None
    key_scores = store.maxsim(encoded.vectors, rows, query_weights=weights)
    fused = config.alpha * _norm(first, config.normalize) + (1 - config.alpha) * _norm(key_scores, config.normalize)
    keep = _top(fused, config.key_keep)
    full_scores = store.maxsim(encoded.vectors, rows[keep])
    final = config.beta * _norm(fused[keep], config.normalize) + (1 - config.beta) * _norm(full_scores,
                                                                                        config.normalize)
    best = _top(final, k)
    return LateResult(rows[keep][best], final[best].astype(np.float32),
                      bytes_read=store.bytes_of(rows) + store.bytes_of(rows[keep]),
                      pages_scored={"first_stage": len(rows), "key": len(rows), "full": len(keep)})


def rerank_candidates(query: str, rows: np.ndarray, first_scores: np.ndarray, encoder: MultiVectorEncoder,
                      store: EmbeddingStore, k: int = 5, weight: float = 0.0, normalize: str = "minmax",
                      encoded: QueryVectors | None = None) -> LateResult:
    """One-pass rerank: full MaxSim on the given candidates, fused as weight·first + (1-weight)·MaxSim."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return LateResult(np.zeros(0, np.int64), np.zeros(0, np.float32))
    encoded = encoded or encoder.encode_queries([query])[0]
    late = store.maxsim(encoded.vectors, rows)
    fused = weight * _norm(first_scores, normalize) + (1 - weight) * _norm(late, normalize)
    best = _top(fused, k)
    return LateResult(rows[best], fused[best].astype(np.float32), bytes_read=store.bytes_of(rows),
                      pages_scored={"full": len(rows)})


def exhaustive_search(query: str, encoder: MultiVectorEncoder, store: EmbeddingStore, k: int = 5,
                      encoded: QueryVectors | None = None) -> LateResult:
    """Full MaxSim against every page: the quality and cost reference for HEAVEN."""
    encoded = encoded or encoder.encode_queries([query])[0]
    scores = store.maxsim(encoded.vectors)
    best = _top(scores, k)
    return LateResult(best.astype(np.int64), scores[best].astype(np.float32),
                      bytes_read=store.bytes_of(np.arange(store.num_pages)), pages_scored={"full": store.num_pages})


