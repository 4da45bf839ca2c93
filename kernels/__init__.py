"""Numba and Triton kernels, each beside a plain reference implementation."""

from .bm25 import BACKENDS as BM25_BACKENDS
from .bm25 import ScoreMatrix, topk, topk_batch, topk_reference
from .maxsim import MAXSIM_BACKENDS, einsum_maxsim_padded, maxsim, maxsim_reference

__all__ = ["BM25_BACKENDS", "ScoreMatrix", "topk", "topk_batch", "topk_reference",
           "MAXSIM_BACKENDS", "einsum_maxsim_padded", "maxsim", "maxsim_reference"]
