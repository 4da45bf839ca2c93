"""Build and locate a corpus's late-interaction page embeddings (`dossier index --late MODEL`).

MODEL is "minilm" (text: all-MiniLM-L6-v2 token vectors, bundled) or a local directory holding a
ColQwen2/ColQwen2.5/ColPali checkpoint in transformers format (page images). Embeddings go to
`{corpus}/late/{name}/` (see store.py) in the BM25 index's page order, so BM25 rows and
embedding page ids coincide. An interrupted build resumes where it stopped.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from tools.errors import DossierError
from tools.late.base import MultiVectorEncoder
from tools.late.store import EmbeddingStore, EmbeddingStoreWriter

__all__ = ["load_encoder", "encoder_name", "late_dir", "build_late_index", "open_late_store", "LATE_DIR"]

LATE_DIR = "late"


def encoder_name(spec: str) -> str:
    """Folder name for a MODEL spec: "minilm", or the checkpoint directory's name, sanitised."""
    if spec == "minilm":
        return "minilm"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(spec).resolve().name) or "model"


def load_encoder(spec: str, device: str = "cpu", dtype=None) -> MultiVectorEncoder:
    """The encoder for a MODEL spec ("minilm" or a ColQwen/ColPali checkpoint directory).

    Args:
        spec: "minilm" or a checkpoint directory.
        device: torch device.
        dtype: compute dtype (None: fp32 on CPU; bf16 on CUDA for the vision models).
    """
    if spec == "minilm":
        import torch

        from tools.late.text import MiniLMTextEncoder

        return MiniLMTextEncoder(device=device, dtype=dtype or torch.float32)
    path = Path(spec)
    if not (path / "config.json").is_file():
        raise DossierError(f"late-interaction model {spec!r} is neither 'minilm' nor a checkpoint directory "
                           f"with a config.json")
    from tools.late.vision import ColVisionEncoder

    return ColVisionEncoder.from_directory(path, device=device, dtype=dtype)


def late_dir(corpus: str | Path, spec: str) -> Path:
    return Path(corpus) / LATE_DIR / encoder_name(spec)


def _page_rows(corpus: Path, store) -> list[tuple[str, int]]:
    meta = corpus / "index" / "pages.json"
    if meta.is_file():
        return [(d, p) for d, p in json.loads(meta.read_text())["pages"]]
    return [(page.document, page.page) for page in store.iter_pages()]


def build_late_index(corpus: str | Path, spec: str = "minilm", *, dtype: str = "int8", batch_pages: int = 16,
                     device: str = "cpu", encoder: MultiVectorEncoder | None = None,
                     progress: Callable[[int, int], None] | None = None) -> dict:
    """Encode every page of a corpus and store the vectors; resumes an interrupted build.

    Args:
        corpus: corpus directory (after `dossier ingest`, ideally `dossier index`).
        spec: "minilm" or a ColQwen/ColPali checkpoint directory.
        dtype: "int8" (1 byte per dim + a scale per vector) or "float16".
        batch_pages: pages encoded per call.
        device: torch device for the encoder.
        encoder: an already loaded encoder (overrides spec's loading; spec still names the folder).
        progress: called as progress(pages_done, pages_total).

    Returns:
        Build statistics: pages, vectors, bytes, seconds.
    """
    from tools.corpus import CorpusStore

    corpus = Path(corpus)
    store = CorpusStore(corpus)
    rows = _page_rows(corpus, store)
    if not rows:
        raise DossierError(f"corpus {corpus} has no pages; ingest PDFs first")
    encoder = encoder or load_encoder(spec, device)
    start = time.perf_counter()
    writer = EmbeddingStoreWriter(late_dir(corpus, spec), encoder=encoder.name, dim=encoder.dim, dtype=dtype,
                                  page_rows=rows, fingerprint=store.fingerprint())
    for lo in range(writer.pages_done, len(rows), batch_pages):
        batch = rows[lo: lo + batch_pages]
        if encoder.modality == "text":
            inputs = [store.page(doc, page).text for doc, page in batch]
        else:
            inputs = [store.render(doc, page) for doc, page in batch]
        writer.append(encoder.encode_pages(inputs))
        if progress:
            progress(writer.pages_done, len(rows))
    opened = writer.close()
    return {"pages": opened.num_pages, "vectors": int(opened.meta["vectors"]),
            "bytes": int(opened.vectors.nbytes + (opened.scales.nbytes if opened.scales is not None else 0)),
            "dtype": dtype, "encoder": encoder.name, "seconds": time.perf_counter() - start,
            "folder": str(opened.folder)}


def open_late_store(corpus: str | Path, spec: str = "minilm") -> EmbeddingStore:
    """The corpus's embeddings for MODEL spec; checks they match the corpus."""
    from tools.corpus import CorpusStore

    opened = EmbeddingStore.open(late_dir(corpus, spec))
    fingerprint = CorpusStore(corpus).fingerprint()
    if opened.meta.get("fingerprint") and opened.meta["fingerprint"] != fingerprint:
        raise DossierError(f"the late-interaction embeddings of {corpus} predate its current pages; rebuild them "
                           f"with `dossier index --corpus {corpus} --late {spec}`")
    return opened
