"""Late-interaction (multi-vector) page search: encoders, embedding store, HEAVEN two-stage reranking."""

from tools.late.base import MultiVectorEncoder, QueryVectors
from tools.late.heaven import HeavenConfig, LateResult, exhaustive_search, heaven_search, rerank_candidates
from tools.late.index import build_late_index, encoder_name, late_dir, load_encoder, open_late_store
from tools.late.key_tokens import is_key_word, key_token_mask
from tools.late.rerank import LateReranker, bm25_first_stage, late_search_hits
from tools.late.store import EmbeddingStore, EmbeddingStoreWriter, quantize_int8

__all__ = [
    "EmbeddingStore",
    "EmbeddingStoreWriter",
    "HeavenConfig",
    "LateReranker",
    "LateResult",
    "MultiVectorEncoder",
    "QueryVectors",
    "bm25_first_stage",
    "build_late_index",
    "encoder_name",
    "exhaustive_search",
    "heaven_search",
    "is_key_word",
    "key_token_mask",
    "late_dir",
    "late_search_hits",
    "load_encoder",
    "open_late_store",
    "quantize_int8",
    "rerank_candidates",
]
