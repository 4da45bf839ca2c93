"""The page search index: BM25 (built with bm25s, Lucene variant) plus positions and a sorted vocabulary.

Built from a corpus store into `{corpus}/index/`:
    bm25/          bm25s's saved index (score matrix as .npy, vocabulary, parameters)
    positions/     the positional index (positions.py)
    vocab.npy      sorted vocabulary strings (wildcard and prefix expansion)
    pages.json     page rows: [[document, page], ...] and build metadata
    whoosh/        the whoosh-compatible retriever's index, built on first use (whoosh_index.py)

Everything is memory-mapped on load. `search()` evaluates the Boolean query into a set
of pages, then ranks them by BM25 over the query's positive words (the words not under
NOT, wildcard expansions included) with the kernels in `kernels.bm25`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.atomic import atomic_folder
from tools.errors import DossierError
from tools.search.positions import PositionalIndex
from tools.search.tokenize import ANALYZER_VERSION, index_compatible, tokens

__all__ = ["BM25Params", "SearchIndex", "build_index", "INDEX_DIR", "RETRIEVERS"]

log = logging.getLogger(__name__)

INDEX_DIR = "index"
RETRIEVERS = ("default", "whoosh-compatible")  # our tokenizer + bm25s scores; Whoosh's analyzer + BM25F


@dataclass(slots=True, frozen=True)
class BM25Params:
    k1: float = 1.5  # term-frequency saturation
    b: float = 0.75  # length normalisation
    method: str = "lucene"  # bm25s scoring variant

    def __post_init__(self):
        if self.k1 < 0 or not 0 <= self.b <= 1:
            raise DossierError(f"BM25 parameters out of range: k1={self.k1} (>= 0), b={self.b} (0..1)")


def _bm25s():
    """Import bm25s, which sets its own logger to DEBUG on import; keep it to warnings."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def build_index(store, params: BM25Params | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict:
    """Tokenise every page of the store and write the index beside it.

    Args:
        store: a `tools.corpus.CorpusStore`.
        params: BM25 parameters (defaults: Lucene, k1 = 1.5, b = 0.75).
        progress: called as progress(pages_done, pages_total).

    Returns:
        Build statistics: pages, vocabulary size, tokens, seconds.
    """
    bm25s = _bm25s()
    params = params or BM25Params()
    start = time.perf_counter()
    total = store.stats()["pages"]
    if total == 0:
        raise DossierError(f"corpus {store.root} has no pages; ingest PDFs first")
    vocab: dict[str, int] = {}
    rows: list[list] = []
    page_ids: list[np.ndarray] = []
    for n, page in enumerate(store.iter_pages(), start=1):
        ids = [vocab.setdefault(token, len(vocab)) for token in tokens(page.text)]
        page_ids.append(np.array(ids, dtype=np.int32))
        rows.append([page.document, page.page])
        if progress and (n % 256 == 0 or n == total):
            progress(n, total)
    # Renumber the vocabulary in sorted order so wildcard expansion is a range scan.
    words = sorted(vocab)
    remap = np.empty(len(vocab), dtype=np.int32)
    for new_id, word in enumerate(words):
        remap[vocab[word]] = new_id
    page_ids = [remap[ids] for ids in page_ids]
    sorted_vocab = {word: i for i, word in enumerate(words)}

    retriever = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    retriever.index(([ids.tolist() for ids in page_ids], sorted_vocab), show_progress=False)
    with atomic_folder(store.root / INDEX_DIR) as tmp:  # two `dossier index` at once no longer share one folder
        retriever.save(tmp / "bm25", show_progress=False)
        PositionalIndex.build(page_ids, len(words)).save(tmp / "positions")
        np.save(tmp / "vocab.npy", np.array(words, dtype=str))
        meta = {
            "pages": rows,
            "fingerprint": store.fingerprint(),
            "analyzer_version": ANALYZER_VERSION,
            "bm25": {"k1": params.k1, "b": params.b, "method": params.method},
            "built_at": time.time(),
        }
        (tmp / "pages.json").write_text(json.dumps(meta))
    n_tokens = int(sum(len(ids) for ids in page_ids))
    return {"pages": total, "vocabulary": len(words), "tokens": n_tokens, "seconds": time.perf_counter() - start}


class SearchIndex:
    """A loaded index (memory-mapped). Use `SearchIndex.load(corpus_dir)`."""

    def __init__(self, folder: Path, matrix, positions: PositionalIndex, vocab: np.ndarray, meta: dict):
        self.folder = folder
        self.matrix = matrix  # kernels.bm25.ScoreMatrix: per token, (page row, BM25 contribution) postings
        self.positions = positions
        self.vocab = vocab  # sorted token strings; token id = position in this array
        self.meta = meta
        self.page_rows: list[tuple[str, int]] = [(d, p) for d, p in meta["pages"]]
        self.row_of = {key: row for row, key in enumerate(self.page_rows)}
        self.doc_rows: dict[str, tuple[int, int]] = {}
        for row, (doc, _) in enumerate(self.page_rows):
            lo, _hi = self.doc_rows.get(doc, (row, row))
            self.doc_rows[doc] = (lo, row + 1)

    @classmethod
    def load(cls, corpus: str | Path, retriever: str = "default") -> SearchIndex:
        """Load the index of a corpus directory.

        Args:
            corpus: the corpus directory.
            retriever: "default" (our analyzer, bm25s Lucene scores), or "whoosh-compatible" (Whoosh's
                analyzer and BM25F, `tools/search/whoosh_index.py`; built beside the index on first use).

        Raises:
            DossierError: the corpus has no index, it was built by another analyzer version, or the
                retriever is unknown.
        """
        from kernels.bm25 import ScoreMatrix

        if retriever not in RETRIEVERS:
            raise DossierError(f"unknown retriever {retriever!r}; use one of {', '.join(RETRIEVERS)}")
        folder = Path(corpus) / INDEX_DIR
        meta_path = folder / "pages.json"
        if not meta_path.is_file():
            raise DossierError(f"corpus {corpus} has no search index; run `dossier index --corpus {corpus}`")
        meta = json.loads(meta_path.read_text())
        vocab = np.load(folder / "vocab.npy", mmap_mode="r")
        if not index_compatible(meta.get("analyzer_version"), vocab):
            raise DossierError(f"the index of {corpus} was built by another tokenizer version; "
                               f"rebuild it with `dossier index --corpus {corpus}`")
        if retriever == "whoosh-compatible":
            from tools.search.whoosh_index import WHOOSH_DIR, load_whoosh_index

            matrix, positions, vocab = load_whoosh_index(Path(corpus), folder / WHOOSH_DIR, meta)
            return cls(folder / WHOOSH_DIR, matrix, positions, vocab, meta | {"retriever": retriever})
        matrix = ScoreMatrix.load_bm25s_dir(folder / "bm25")  # bm25s's files, read without importing it
        return cls(folder, matrix, PositionalIndex.load(folder / "positions"), vocab, meta)

    @property
    def num_pages(self) -> int:
        return len(self.page_rows)

    def is_stale(self, store) -> bool:
        """True when the corpus changed after this index was built."""
        return store.fingerprint() != self.meta.get("fingerprint")

    def token_id(self, token: str) -> int | None:
        i = int(np.searchsorted(self.vocab, token))
        return i if i < len(self.vocab) and self.vocab[i] == token else None

    def expand(self, pattern) -> list[int]:
        """Token ids of the vocabulary matching a `Wildcard` (range scan over its literal prefix)."""
        prefix = pattern.prefix
        lo = int(np.searchsorted(self.vocab, prefix, side="left"))
        hi = int(np.searchsorted(self.vocab, prefix + "\U0010ffff", side="left")) if prefix else len(self.vocab)
        regex = pattern.regex()
        return [i for i in range(lo, hi) if regex.fullmatch(str(self.vocab[i]))]
