"""Page multi-vectors on disk: fp16 or int8 memory-maps with row offsets, written resumably.

Layout of a store directory (`{corpus}/late/{encoder name}/`, beside `{corpus}/index/`, which a
BM25 rebuild replaces wholesale):
    meta.json     {"encoder", "dim", "dtype", "pages", "vectors", "page_rows", "fingerprint", "complete"}
    vectors.bin   (vectors, dim) float16, or int8 with
    scales.bin    (vectors,) float32 per-vector scale (int8: v ~ q * scale, symmetric, |q| <= 127)
    offsets.bin   (pages + 1,) int64: page p owns rows offsets[p]:offsets[p+1]
    progress.json while writing: pages and rows already on disk (a killed build resumes there)

Pages are stored in the BM25 index's row order (`page_rows`), so a BM25 row id is a page id here.
`EmbeddingStore.to_device("cuda")` copies the vectors to the GPU once; MaxSim then runs there in
the fused Triton kernel (`kernels/maxsim_triton.py`), reading only the candidates' rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from tools.atomic import write_json_atomic
from tools.errors import DossierError

__all__ = ["EmbeddingStore", "EmbeddingStoreWriter", "quantize_int8", "STORE_DTYPES"]

STORE_DTYPES = ("float16", "int8")


def quantize_int8(vectors: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-vector int8: returns (int8 (n, dim), float32 scales (n,))."""
    vectors = vectors.float()
    scales = vectors.abs().amax(dim=1).clamp_min(1e-12) / 127.0  # (n,)
    q = torch.round(vectors / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q.numpy(), scales.numpy().astype(np.float32)


class EmbeddingStoreWriter:
    """Append pages' vectors in order; `close()` writes offsets and marks the store complete.

    Re-opening a directory with an unfinished build of the same settings resumes after the last
    saved page (`pages_done`).
    """

    def __init__(self, folder: str | Path, *, encoder: str, dim: int, dtype: str, page_rows: list[tuple[str, int]],
                 fingerprint: str = "", flush_every: int = 64):
        if dtype not in STORE_DTYPES:
            raise DossierError(f"late-interaction storage dtype must be one of {STORE_DTYPES}, got {dtype!r}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.settings = {"encoder": encoder, "dim": int(dim), "dtype": dtype, "pages": len(page_rows),
                         "page_rows": [list(r) for r in page_rows], "fingerprint": fingerprint}
        self.flush_every = flush_every
        progress = self.folder / "progress.json"
        self.lengths: list[int] = []
        rows_done = 0
        if progress.is_file():
            saved = json.loads(progress.read_text())
            if saved.get("settings") == self.settings:
                self.lengths = saved["lengths"]
                rows_done = sum(self.lengths)
        itemsize = 2 if dtype == "float16" else 1
        self._vectors = open(self.folder / "vectors.bin", "ab" if rows_done else "wb")
        self._vectors.truncate(rows_done * dim * itemsize)  # drop rows written after the last save
        self._vectors.seek(0, os.SEEK_END)
        self._scales = None
        if dtype == "int8":
            self._scales = open(self.folder / "scales.bin", "ab" if rows_done else "wb")
            self._scales.truncate(rows_done * 4)
            self._scales.seek(0, os.SEEK_END)
        (self.folder / "meta.json").unlink(missing_ok=True)

    @property
    def pages_done(self) -> int:
        return len(self.lengths)

    def append(self, pages: list[torch.Tensor]) -> None:
        """Add the next pages' (n_i, dim) vectors."""
        for vectors in pages:
            if vectors.ndim != 2 or vectors.shape[1] != self.settings["dim"]:
                raise DossierError(f"page vectors must be (n, {self.settings['dim']}), got {tuple(vectors.shape)}")
            if self.settings["dtype"] == "float16":
                self._vectors.write(vectors.to(torch.float16).contiguous().numpy().tobytes())
            else:
                q, scales = quantize_int8(vectors)
                self._vectors.write(q.tobytes())
                self._scales.write(scales.tobytes())
            self.lengths.append(int(vectors.shape[0]))
            if len(self.lengths) % self.flush_every == 0:
                self._save_progress()

    def _save_progress(self) -> None:
        self._vectors.flush()
        os.fsync(self._vectors.fileno())
        if self._scales:
            self._scales.flush()
            os.fsync(self._scales.fileno())
        write_json_atomic(self.folder / "progress.json", {"settings": self.settings, "lengths": self.lengths})

    def close(self) -> "EmbeddingStore":
        """Finish: requires every page to be appended; returns the opened store."""
        if self.pages_done != self.settings["pages"]:
            raise DossierError(f"store has {self.pages_done} of {self.settings['pages']} pages; append the rest")
        self._save_progress()
        self._vectors.close()
        if self._scales:
            self._scales.close()
        offsets = np.zeros(self.pages_done + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        offsets.tofile(self.folder / "offsets.bin")
        meta = dict(self.settings, vectors=int(offsets[-1]), complete=True)
        (self.folder / "meta.json").write_text(json.dumps(meta))
        (self.folder / "progress.json").unlink(missing_ok=True)
        return EmbeddingStore.open(self.folder)


@dataclass(slots=True, frozen=True)
class EmbeddingStore:
    """An opened store: memory-mapped vectors (and scales), offsets, metadata."""

    folder: Path  # the store directory
    vectors: np.ndarray | torch.Tensor  # (vectors, dim) float16 or int8 memmap, or a device tensor (`to_device`)
    scales: np.ndarray | torch.Tensor | None  # (vectors,) float32 per-vector scales for int8, else None
    offsets: np.ndarray  # (pages + 1,) int64 (host)
    meta: dict  # meta.json
    backend: str = "auto"  # MaxSim kernel: auto (triton for CUDA tensors, torch otherwise), torch, triton

    @property
    def device(self) -> str:
        """Where the vectors are scored: "cpu" for memory maps, else the tensor's device type."""
        return self.vectors.device.type if isinstance(self.vectors, torch.Tensor) else "cpu"

    @property
    def nbytes(self) -> int:
        """Bytes of vectors and scales (what a copy to the GPU takes)."""
        return self.num_vectors * self.bytes_per_vector

    @property
    def num_vectors(self) -> int:
        return int(self.offsets[-1])

    def to_device(self, device: str, backend: str = "auto") -> "EmbeddingStore":
        """This store with its vectors (and scales) copied to `device` as tensors, scored there by `backend`.

        The copy is made once (on CUDA every later MaxSim reads device memory only); offsets stay on the host.
        """
        vectors = torch.from_numpy(np.ascontiguousarray(self.vectors)).to(device)
        scales = None if self.scales is None else torch.from_numpy(np.ascontiguousarray(self.scales)).to(device)
        return replace(self, vectors=vectors, scales=scales, backend=backend)

    @classmethod
    def open(cls, folder: str | Path) -> "EmbeddingStore":
        folder = Path(folder)
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            hint = " (an unfinished build: re-run it to resume)" if (folder / "progress.json").is_file() else ""
            raise DossierError(f"no late-interaction embeddings at {folder}{hint}; build them with "
                               f"`dossier index --late MODEL`")
        meta = json.loads(meta_path.read_text())
        dim, total = meta["dim"], meta["vectors"]
        dtype = np.float16 if meta["dtype"] == "float16" else np.int8
        vectors = np.memmap(folder / "vectors.bin", dtype=dtype, mode="r", shape=(total, dim)) if total else \
            np.zeros((0, dim), dtype=dtype)
        scales = None
        if meta["dtype"] == "int8":
            scales = np.memmap(folder / "scales.bin", dtype=np.float32, mode="r", shape=(total,)) if total else \
                np.zeros(0, np.float32)
        offsets = np.fromfile(folder / "offsets.bin", dtype=np.int64)
        if len(offsets) != meta["pages"] + 1 or offsets[-1] != total:
            raise DossierError(f"late-interaction store {folder} is inconsistent; rebuild it")
        return cls(folder, vectors, scales, offsets, meta)

    @property
    def num_pages(self) -> int:
        return len(self.offsets) - 1

    @property
    def bytes_per_vector(self) -> int:
        itemsize = self.vectors.element_size() if isinstance(self.vectors, torch.Tensor) else self.vectors.itemsize
        return self.vectors.shape[1] * itemsize + (4 if self.scales is not None else 0)

    def bytes_of(self, page_ids: np.ndarray) -> int:
        """Embedding bytes MaxSim reads for these pages (each counted once)."""
        ids = np.unique(np.asarray(page_ids, dtype=np.int64))
        return int((self.offsets[ids + 1] - self.offsets[ids]).sum()) * self.bytes_per_vector

    def maxsim(self, query: torch.Tensor, page_ids: np.ndarray | None = None,
               query_weights: torch.Tensor | None = None, backend: str = "auto") -> np.ndarray:
        """MaxSim of a query's vectors against the listed pages (all when None), float32 (host).

        `backend` "auto" takes the store's own (`to_device` sets it).
        """
        from kernels.maxsim import maxsim

        backend = self.backend if backend == "auto" else backend
        scores = maxsim(query, self.vectors, self.offsets, page_ids=page_ids, scales=self.scales,
                        query_weights=query_weights, backend=backend)
        return scores.cpu().numpy()
