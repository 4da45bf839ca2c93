"""The multi-vector encoder interface shared by the text (MiniLM) and page-image (ColQwen/ColPali) encoders.

A late-interaction encoder maps a query to a few vectors (one per token) and a page to many
(one per token or image patch); pages are ranked by MaxSim (`kernels.maxsim`). Every vector is
L2-normalised, so a similarity is a cosine. `QueryVectors.key_mask` marks the query's key tokens
(content words: `tools/late/key_tokens.py`) for HEAVEN's first, cheaper MaxSim pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["QueryVectors", "MultiVectorEncoder"]


@dataclass(slots=True, frozen=True)
class QueryVectors:
    """One encoded query."""

    vectors: torch.Tensor  # (n, dim) float32, unit rows
    tokens: list[str]  # (n,) the token each vector belongs to (for inspection and key tokens)
    key_mask: torch.Tensor  # (n,) bool: key (content) tokens; all True when none qualify

    def __post_init__(self) -> None:
        assert self.vectors.ndim == 2 and len(self.tokens) == len(self.vectors) == len(self.key_mask)


class MultiVectorEncoder(ABC):
    """Encodes queries and pages into unit-norm multi-vectors of width `dim`."""

    name: str  # stable identifier stored with the page embeddings (e.g. "minilm")
    modality: str  # "text": pages are given as their text; "image": as rendered PIL images
    dim: int  # vector width

    @abstractmethod
    def encode_queries(self, texts: list[str]) -> list[QueryVectors]:
        """Encode queries (batched internally)."""

    @abstractmethod
    def encode_pages(self, pages: list[Any]) -> list[torch.Tensor]:
        """Encode pages (text or PIL images, per `modality`) into (n_i, dim) float32 tensors."""
