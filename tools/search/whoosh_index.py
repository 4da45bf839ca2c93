"""The whoosh-compatible index: Whoosh's StandardAnalyzer and BM25F over the same pages, our kernels.

MADQA's harness indexes each page's text in a Whoosh `TEXT` field (StandardAnalyzer) and
searches it with `QueryParser` and `BM25F(K1=1.2, B=0.75)`. This index reproduces that:
- `whoosh_tokens`: StandardAnalyzer = RegexTokenizer(r"\\w+(\\.?\\w+)*") | LowercaseFilter
  (`str.lower`) | StopFilter(Whoosh's 34-word list, minsize=2). So "$1,577" is "577",
  "U.S." is "u.s", "10-K" is "10", and a run of CJK characters is one token.
- Scores: `kernels.bm25_whoosh` (quantised field lengths, Whoosh's idf).
- Pages are rows in the same order as the default index (document id, then page), which
  is the order a harness that adds them that way gives them, so ties break alike.

Built lazily into `{corpus}/index/whoosh/` the first time a whoosh-compatible searcher opens
the corpus, and rebuilt when `dossier index` rebuilds the default index (which removes it).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np

from tools.atomic import atomic_folder
from tools.search.positions import PositionalIndex

__all__ = ["WHOOSH_STOP_WORDS", "whoosh_tokens", "build_whoosh_index", "load_whoosh_index", "WHOOSH_DIR"]

WHOOSH_DIR = "whoosh"
WHOOSH_ANALYZER_VERSION = 1  # bump when whoosh_tokens changes

# whoosh.analysis.filters.STOP_WORDS
WHOOSH_STOP_WORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "for", "from", "have", "if", "in", "is", "it",
    "may", "not", "of", "on", "or", "tbd", "that", "the", "this", "to", "us", "we", "when", "will", "with",
    "yet", "you", "your"))
_MIN_SIZE = 2  # StandardAnalyzer(minsize=2): shorter tokens are stopped
_WORD_RE = re.compile(r"\w+(\.?\w+)*", re.UNICODE)  # whoosh.analysis.tokenizers.default_pattern


def whoosh_tokens(text: str) -> list[str]:
    """StandardAnalyzer's tokens of a text, in order (stopped tokens removed, as when indexing)."""
    out = []
    for match in _WORD_RE.finditer(text):
        token = match.group(0).lower()
        if len(token) >= _MIN_SIZE and token not in WHOOSH_STOP_WORDS:
            out.append(token)
    return out


def whoosh_word(text: str) -> str:
    """A wildcard's text as Whoosh's parser keeps it: lower-cased, not tokenized."""
    return text.lower()


def build_whoosh_index(store, folder: Path, main_meta: dict) -> None:
    """Analyse every page of the store with Whoosh's analyzer and write the index to `folder`."""
    from kernels.bm25_whoosh import WHOOSH_B, WHOOSH_K1, whoosh_score_matrix

    vocab: dict[str, int] = {}
    page_ids: list[np.ndarray] = []
    rows = []
    for page in store.iter_pages():
        page_ids.append(np.array([vocab.setdefault(t, len(vocab)) for t in whoosh_tokens(page.text)], dtype=np.int32))
        rows.append([page.document, page.page])
    if rows != main_meta["pages"]:
        from tools.errors import DossierError

        raise DossierError(f"the corpus {store.root} changed since it was indexed; run `dossier index` first")
    words = sorted(vocab)
    remap = np.empty(len(vocab), dtype=np.int32)
    for new_id, word in enumerate(words):
        remap[vocab[word]] = new_id
    page_ids = [remap[ids] for ids in page_ids]
    positions = PositionalIndex.build(page_ids, len(words))
    tf = np.diff(positions.pos_ptr)
    lengths = np.array([len(ids) for ids in page_ids], dtype=np.int64)
    matrix = whoosh_score_matrix(positions.doc_ptr, positions.docs, tf, lengths)

    with atomic_folder(folder) as tmp:  # a process that builds it at the same time keeps its own or ours
        positions.save(tmp / "positions")
        np.save(tmp / "vocab.npy", np.array(words, dtype=str))
        np.save(tmp / "score_data.npy", matrix.data)
        meta = {"analyzer_version": WHOOSH_ANALYZER_VERSION, "k1": WHOOSH_K1, "b": WHOOSH_B,
                "main_built_at": main_meta.get("built_at"), "pages": len(rows), "built_at": time.time()}
        (tmp / "meta.json").write_text(json.dumps(meta))


def _current(folder: Path, main_meta: dict) -> bool:
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return False
    meta = json.loads(meta_path.read_text())
    return meta.get("analyzer_version") == WHOOSH_ANALYZER_VERSION and meta.get("main_built_at") == main_meta.get("built_at")


def load_whoosh_index(corpus: Path, folder: Path, main_meta: dict):
    """(score matrix, positions, vocabulary) of the whoosh-compatible index in `folder`, built first
    when missing or older than the default index described by `main_meta`."""
    from kernels.bm25 import ScoreMatrix
    from tools.corpus import CorpusStore

    if not _current(folder, main_meta):
        build_whoosh_index(CorpusStore(corpus), folder, main_meta)
    positions = PositionalIndex.load(folder / "positions")
    matrix = ScoreMatrix(data=np.load(folder / "score_data.npy", mmap_mode="r"), indices=positions.docs,
                         indptr=positions.doc_ptr, num_docs=len(main_meta["pages"]))
    return matrix, positions, np.load(folder / "vocab.npy", mmap_mode="r")
