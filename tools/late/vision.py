"""Page-image multi-vectors from ColQwen2 / ColQwen2.5 / ColPali checkpoints in a local directory.

Loads with the architecture classes transformers provides (`ColQwen2ForRetrieval` +
`ColQwen2Processor` for model_type "colqwen2", whose vlm_config may be Qwen2-VL or Qwen2.5-VL;
`ColPaliForRetrieval` + `ColPaliProcessor` for "colpali"), never from a hub. A page image
gives one vector per image token (plus the processor's short text prompt), a query one per
token including the processor's prefix and its 10 query-augmentation tokens, as ColPali
scores them. Padding positions are dropped. Vectors come out L2-normalised (the models do it).
Key tokens (HEAVEN's first pass) are the query's own content words; prefix and augmentation
tokens are never key.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch

from tools.errors import DossierError
from tools.late.base import MultiVectorEncoder, QueryVectors
from tools.late.key_tokens import key_token_mask, words_of_pieces

__all__ = ["ColVisionEncoder"]

_FAMILIES = {
    "colqwen2": ("ColQwen2ForRetrieval", "ColQwen2Processor"),
    "colpali": ("ColPaliForRetrieval", "ColPaliProcessor"),
}


class ColVisionEncoder(MultiVectorEncoder):
    """A ColQwen2(.5)/ColPali retriever as a late-interaction page-image encoder.

    Args:
        model: a loaded `ColQwen2ForRetrieval` / `ColPaliForRetrieval`.
        processor: its processor.
        name: identifier stored with the embeddings.
        batch_size: images or queries per forward pass.
    """

    modality = "image"

    def __init__(self, model, processor, name: str, batch_size: int = 4):
        self.model = model.eval()
        self.processor = processor
        self.name = name
        self.batch_size = batch_size
        self.dim = int(model.config.embedding_dim)
        self.device = next(model.parameters()).device
        self._inputs = set(inspect.signature(model.forward).parameters) - {"labels"}

    @classmethod
    def from_directory(cls, path: str | Path, device: str = "cpu", dtype: torch.dtype | None = None,
                       batch_size: int = 4) -> "ColVisionEncoder":
        """Load a checkpoint directory (config.json model_type "colqwen2" or "colpali")."""
        import transformers

        path = Path(path)
        config_file = path / "config.json"
        if not config_file.is_file():
            raise DossierError(f"{path} holds no checkpoint (config.json missing)")
        model_type = json.loads(config_file.read_text()).get("model_type")
        if model_type not in _FAMILIES:
            raise DossierError(f"{path} is a {model_type!r} checkpoint; late-interaction page encoders supported: "
                               f"{', '.join(_FAMILIES)} (transformers format, e.g. vidore/colqwen2.5-v0.2 converted)")
        model_cls, processor_cls = (getattr(transformers, name) for name in _FAMILIES[model_type])
        if dtype is None:
            dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
        model = model_cls.from_pretrained(path, dtype=dtype).to(device)
        processor = processor_cls.from_pretrained(path)
        return cls(model, processor, name=f"{model_type}:{path.name}", batch_size=batch_size)

    @torch.inference_mode()
    def _forward(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = {k: v.to(self.device) for k, v in batch.items() if k in self._inputs}
        out = self.model(**inputs)
        return out.embeddings.float().cpu(), batch["attention_mask"].bool()  # (b, seq, dim), (b, seq)

    def encode_pages(self, pages: list) -> list[torch.Tensor]:
        """Vectors of each page image (PIL), padding removed."""
        result: list[torch.Tensor] = []
        for lo in range(0, len(pages), self.batch_size):
            images = [page.convert("RGB") for page in pages[lo: lo + self.batch_size]]
            embeddings, mask = self._forward(self.processor.process_images(images))
            result.extend(embeddings[i][mask[i]] for i in range(len(images)))
        return result

    def encode_queries(self, texts: list[str]) -> list[QueryVectors]:
        """Vectors of each query's tokens (with the processor's prefix and augmentation tokens)."""
        tokenizer = self.processor.tokenizer
        special_ids = set(tokenizer.all_special_ids)
        result: list[QueryVectors] = []
        for lo in range(0, len(texts), self.batch_size):
            chunk = texts[lo: lo + self.batch_size]
            batch = self.processor.process_queries(chunk)
            embeddings, mask = self._forward(batch)
            for i, text in enumerate(chunk):
                ids = batch["input_ids"][i][mask[i]].tolist()
                raw = tokenizer.convert_ids_to_tokens(ids)
                pieces = [tokenizer.convert_tokens_to_string([t]) for t in raw]
                starts = [t.startswith(("Ġ", "▁", " ")) for t in raw]  # byte-level BPE / SentencePiece
                words = words_of_pieces(pieces, [t in special_ids for t in ids], text, starts)
                result.append(QueryVectors(embeddings[i][mask[i]], raw, torch.tensor(key_token_mask(words))))
        return result
