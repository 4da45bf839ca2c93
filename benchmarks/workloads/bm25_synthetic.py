"""A synthetic BM25 corpus at any scale, scored with bm25s's own functions, cached on disk.

Recipe: `num_docs` pages whose lengths are log-normal around `mean_doc_len` tokens, each token
drawn from a Zipf(`zipf_exponent`) vocabulary of `vocab_size` words. Sampling runs in Numba,
several threads, each chunk of pages seeded from (seed, chunk) so the corpus is the same for
any thread count. The score matrix is then built with bm25s's scoring functions (Lucene idf and
tf component by default) and bm25s's counting-sort CSC builder, so bm25s and our kernels search
the very same arrays; `tests/kernels/test_workloads.py` checks that it equals
`bm25s.BM25().build_index_from_ids` on the same tokens.

1M pages x ~250 tokens take ~1 min and ~1.5 GB on disk; the arrays are cached under
`cache_dir/bm25-synth-<recipe>` and memory-mapped on reuse.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from numba import njit

from kernels.bm25 import ScoreMatrix
from tools.atomic import atomic_folder

__all__ = ["SyntheticRecipe", "sample_tokens", "build_score_matrix", "load_or_build", "default_cache_dir"]

_CHUNK = 20_000  # pages per seeded chunk


@dataclass(slots=True, frozen=True)
class SyntheticRecipe:
    """How to draw the corpus; every field is part of the cache key."""

    num_docs: int = 1_000_000  # pages
    vocab_size: int = 200_000  # distinct words
    zipf_exponent: float = 1.05  # word frequency ~ rank^-exponent
    mean_doc_len: float = 250.0  # mean tokens per page
    doc_len_sigma: float = 0.5  # log-normal spread of page lengths
    seed: int = 0  # sampling seed
    method: str = "lucene"  # bm25s scoring variant (idf and tf component)
    k1: float = 1.5  # bm25s default
    b: float = 0.75  # bm25s default

    def __post_init__(self) -> None:
        if self.num_docs < 1 or self.vocab_size < 2:
            raise ValueError(f"need num_docs >= 1 and vocab_size >= 2, got {self.num_docs}, {self.vocab_size}")
        if self.method not in ("lucene", "robertson", "atire"):
            raise ValueError(f"method {self.method!r} unsupported here (lucene, robertson, atire)")

    def key(self) -> str:
        return (f"bm25-synth-n{self.num_docs}-v{self.vocab_size}-z{self.zipf_exponent}-l{self.mean_doc_len}"
                f"-s{self.doc_len_sigma}-seed{self.seed}-{self.method}-k{self.k1}-b{self.b}")


@njit(nogil=True, cache=True)
def _sample_chunk(cdf, lengths, seed, out_tokens):
    """Draw each page's tokens by inverse-CDF sampling, sorted within the page."""
    np.random.seed(seed)
    pos = 0
    for d in range(len(lengths)):
        n = lengths[d]
        for i in range(n):
            out_tokens[pos + i] = np.searchsorted(cdf, np.random.random(), side="right")
        out_tokens[pos:pos + n].sort()
        pos += n


@njit(nogil=True, cache=True)
def _run_lengths(tokens, doc_ptr, out_doc, out_token, out_tf):
    """(doc, token, tf) triples from per-page sorted tokens; returns how many were written."""
    m = 0
    for d in range(len(doc_ptr) - 1):
        start, end = doc_ptr[d], doc_ptr[d + 1]
        i = start
        while i < end:
            j = i + 1
            while j < end and tokens[j] == tokens[i]:
                j += 1
            out_doc[m] = d
            out_token[m] = tokens[i]
            out_tf[m] = j - i
            m += 1
            i = j
    return m


def sample_tokens(recipe: SyntheticRecipe, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All pages' token ids back to back (int32, sorted within a page) and page offsets (int64)."""
    rng = np.random.default_rng(recipe.seed)
    mu = math.log(recipe.mean_doc_len) - recipe.doc_len_sigma ** 2 / 2
    lengths = np.maximum(1, np.rint(rng.lognormal(mu, recipe.doc_len_sigma, recipe.num_docs))).astype(np.int64)
    doc_ptr = np.zeros(recipe.num_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=doc_ptr[1:])
    weights = 1.0 / np.arange(1, recipe.vocab_size + 1, dtype=np.float64) ** recipe.zipf_exponent
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    tokens = np.empty(int(doc_ptr[-1]), dtype=np.int32)
    starts = list(range(0, recipe.num_docs, _CHUNK))

    def work(chunk: int) -> None:
        lo, hi = starts[chunk], min(starts[chunk] + _CHUNK, recipe.num_docs)
        _sample_chunk(cdf, lengths[lo:hi], recipe.seed * 1_000_003 + chunk, tokens[doc_ptr[lo]:doc_ptr[hi]])

    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        list(pool.map(work, range(len(starts))))
    return tokens, doc_ptr


def build_score_matrix(recipe: SyntheticRecipe, threads: int | None = None) -> ScoreMatrix:
    """Sample the corpus and score it with bm25s's functions (in memory; see `load_or_build`)."""
    from bm25s.scoring import _build_idf_array, _select_idf_scorer, _select_tfc_scorer

    tokens, doc_ptr = sample_tokens(recipe, threads)
    n_max = len(tokens)
    doc = np.empty(n_max, dtype=np.int32)
    token = np.empty(n_max, dtype=np.int32)
    tf = np.empty(n_max, dtype=np.float32)
    m = _run_lengths(tokens, doc_ptr, doc, token, tf)
    del tokens
    doc, token, tf = doc[:m], token[:m], tf[:m]
    doc_freq = np.bincount(token, minlength=recipe.vocab_size)
    idf = _build_idf_array({t: int(f) for t, f in enumerate(doc_freq)}, recipe.num_docs,
                           _select_idf_scorer(recipe.method), dtype="float32")
    doc_len = np.diff(doc_ptr)
    avg_len = doc_len.mean()
    tfc_fn = _select_tfc_scorer(recipe.method)
    data = np.empty(m, dtype=np.float32)
    step = 20_000_000
    for lo in range(0, m, step):  # chunks keep the float64 temporaries small
        sl = slice(lo, lo + step)
        # bm25s evaluates this per page with l_d an int and idf float32; same arithmetic, vectorised
        tfc = tfc_fn(tf_array=tf[sl], l_d=doc_len[doc[sl]], l_avg=avg_len, k1=recipe.k1, b=recipe.b)
        data[sl] = idf[token[sl]] * tfc
    del tf
    # bm25s's counting-sort CSC: a stable pass, so doc ids stay ascending within each token
    sorted_data, sorted_docs, indptr = _csc(data, doc, token, (recipe.num_docs, recipe.vocab_size))
    return ScoreMatrix(data=sorted_data, indices=sorted_docs, indptr=indptr, num_docs=recipe.num_docs)


def _csc(data, rows, cols, shape):
    from bm25s.scoring import _np_csc_jit_ready

    return njit(_np_csc_jit_ready)(data, rows, cols, shape)


def default_cache_dir() -> Path:
    """$DOSSIER_CACHE or ~/.cache/dossier: where synthetic indexes are kept between runs."""
    return Path(os.environ.get("DOSSIER_CACHE", Path.home() / ".cache" / "dossier"))


def load_or_build(recipe: SyntheticRecipe, cache_dir: Path | None = None, threads: int | None = None) -> ScoreMatrix:
    """The recipe's score matrix, memory-mapped from the cache, built and saved on first use."""
    folder = Path(cache_dir or default_cache_dir()) / recipe.key()
    names = ("data", "indices", "indptr", "term_upper")
    if not (folder / "recipe.json").exists():
        matrix = build_score_matrix(recipe, threads)
        with atomic_folder(folder) as tmp:  # replaces a half-written folder from an interrupted run
            for name in names:
                np.save(tmp / f"{name}.npy", getattr(matrix, name))
            (tmp / "recipe.json").write_text(json.dumps(asdict(recipe), indent=1))
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in names}
    return ScoreMatrix(num_docs=recipe.num_docs, **arrays)
