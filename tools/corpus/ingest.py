"""Ingest PDFs into a corpus store: parallel extraction, one transaction per document, resumable.

Re-running is idempotent: a file whose sha256 is already stored under its id is skipped;
a changed file (same source path, new bytes) is re-ingested. Bad files are recorded as
per-document errors with a one-line reason and never stop the batch. Extraction runs in
worker processes; only the parent writes to SQLite, one document per transaction, so a
kill at any moment leaves whole documents only, and re-running completes the rest.

Every document is read in a bounded worker (tools/corpus/worker.py): a deadline
(`doc_timeout_s`), an address-space cap (`memory_mb`) and a cap on each page's characters
(`max_page_chars`). A PDF that exceeds one (an 8 KB file of nested drawings can ask for 2^40
text runs) is recorded as an error saying which limit, and the batch goes on.

One ingest at a time per corpus: each holds an exclusive lock on `ingest.lock` in the corpus
directory (flock: the kernel drops it when the process dies) from planning to its last commit,
so a second one waits, saying whose pid holds it, and then plans against what the first stored
(two files with one name: one is stored, the other refused with a reason, never replaced).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tools.atomic import atomic_path
from tools.corpus.pdf import MAX_PAGE_CHARS, DocumentRecord, PdfError, read_pdf, sha256_file
from tools.corpus.pool import run_isolated
from tools.corpus.store import CorpusStore
from tools.corpus.worker import DEFAULT_MEMORY_MB, WorkLimits, memory_exhausted
from tools.errors import DossierError

__all__ = ["IngestConfig", "IngestSummary", "find_pdfs", "ingest", "OcrHook", "OcrOutcome"]

log = logging.getLogger(__name__)

SMALL_BATCH = 8  # at most this many files are read by one worker unless workers is set (starting one costs ~0.2 s)
INFLIGHT = "ingest-inflight.txt"  # left by versions that read small batches in-process; removed on sight
LOCK = "ingest.lock"  # held (flock) by the one ingest writing to this corpus; holds its pid

@dataclass(slots=True)
class OcrOutcome:
    """What the OCR hook did (tools/ocr/pages.py `OcrStep` is the real one)."""

    backend: str | None  # the backend that read the pages; None when no backend was usable
    pages: int  # pages read and written to the store
    errors: list[dict]  # {"document", "page", "reason"} per page that failed (it stays flagged)
    seconds: float  # wall time of the OCR step
    skipped: int = 0  # pages left flagged because no backend was usable


# Called after extraction with the store and the pages to OCR (flagged ones, plus with force_ocr
# the pages OCR read before); writes each page with store.replace_page_text and reports.
OcrHook = Callable[[CorpusStore, list[tuple[str, int]]], OcrOutcome]


@dataclass(slots=True)
class IngestConfig:
    password: str | None = None  # tried on encrypted PDFs
    lock_wait_s: float = 3600.0  # seconds to wait for another ingest into the same corpus before giving up
    workers: int = 0  # extraction processes; 0 = one per CPU core
    ocr: OcrHook | None = None  # reads pages whose text layer is unusable (tools.ocr.OcrStep plugs in here)
    force_ocr: bool = False  # also re-read the pages of the given PDFs that OCR read before (e.g. new backend)
    doc_timeout_s: float = 120.0  # wall-clock seconds one document's text may take (FinanceBench's slowest: <1 s)
    memory_mb: int = DEFAULT_MEMORY_MB  # address-space cap of each extraction worker, MiB; 0 = no cap
    max_page_chars: int = MAX_PAGE_CHARS  # characters one page may hold; more makes the document an error

    def __post_init__(self):
        if self.workers < 0:
            raise DossierError(f"workers must be >= 0 (0 = one per core), got {self.workers}")
        if self.lock_wait_s < 0:
            raise DossierError(f"lock_wait_s must be >= 0 seconds, got {self.lock_wait_s}")
        if not self.doc_timeout_s > 0:
            raise DossierError(f"the per-document time limit must be positive seconds, got {self.doc_timeout_s}")
        if self.max_page_chars < 1000:
            raise DossierError(f"max_page_chars {self.max_page_chars} would refuse ordinary pages (use at least "
                               f"1000; the default is {MAX_PAGE_CHARS:,})")
        WorkLimits(self.doc_timeout_s, self.memory_mb)  # checks the memory limit

    @property
    def limits(self) -> WorkLimits:
        return WorkLimits(self.doc_timeout_s, self.memory_mb)


@dataclass(slots=True)
class IngestSummary:
    documents: int = 0  # documents ingested by this run
    pages: int = 0  # pages ingested by this run
    skipped: int = 0  # already in the store with the same sha256
    errors: list[dict] = field(default_factory=list)  # {"path", "reason"} for files that failed in this run
    needs_ocr: int = 0  # pages of this run's documents flagged for OCR
    ocr_pages: int = 0  # pages read by the OCR hook
    ocr_backend: str | None = None  # which backend read them
    ocr_errors: list[dict] = field(default_factory=list)  # {"document", "page", "reason"} per failed page
    ocr_skipped: int = 0  # flagged pages left unread because no OCR backend was usable
    ocr_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def pages_per_second(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else 0.0

    def to_json(self, store: CorpusStore) -> dict:
        return {
            "documents": self.documents,
            "pages": self.pages,
            "skipped": self.skipped,
            "errors": self.errors,
            "pages_needing_ocr": self.needs_ocr,
            "ocr_pages": self.ocr_pages,
            "ocr_backend": self.ocr_backend,
            "ocr_errors": self.ocr_errors,
            "ocr_seconds": round(self.ocr_seconds, 3),
            "seconds": round(self.seconds, 3),
            "pages_per_second": round(self.pages_per_second, 1),
            "corpus": {"path": str(store.root), **store.stats()},
        }


def find_pdfs(inputs: Iterable[str | Path]) -> list[Path]:
    """Expand files and directories (recursively, *.pdf in any case) into a sorted file list.

    Raises:
        DossierError: an input path does not exist.
    """
    found: dict[Path, None] = {}
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            for sub in sorted(path.rglob("*")):
                if sub.is_file() and sub.suffix.lower() == ".pdf":
                    found[sub.resolve()] = None
        elif path.is_file():
            found[path.resolve()] = None
        else:
            raise DossierError(f"{path}: no such file or directory (give PDF files or folders of PDFs)")
    return list(found)


@dataclass(slots=True)
class _Job:
    path: Path
    doc_id: str
    sha256: str
    size: int


def _extract(path: str, password: str | None, sha256: str, max_page_chars: int = MAX_PAGE_CHARS) -> DocumentRecord | str:
    """Worker: a DocumentRecord, or the one-line reason the file cannot be ingested."""
    try:
        return read_pdf(path, password, sha256, max_page_chars)
    except PdfError as err:
        return str(err)
    except Exception as err:  # a reader bug must cost one document, not the batch
        if memory_exhausted(err):
            raise MemoryError(str(err)) from None  # the worker reports it; _over_limit names the limit
        return f"unreadable PDF ({type(err).__name__}: {str(err)[:120]})"


def _over_limit(status: str, detail: object, limits: WorkLimits) -> str:
    """The reason recorded for a document whose worker hit a limit or died (see tools/corpus/pool.py)."""
    if status == "timeout":
        return (f"reading it took longer than {detail:g} s, the per-document limit (--doc-timeout); it may be built "
                "to hang PDF readers (e.g. drawings nested to repeat exponentially), or raise the limit")
    if status == "memory":
        cap = f"{limits.memory_mb} MB" if limits.memory_mb else "the memory it could get"
        return (f"reading it needed more than {cap} of memory, the per-worker limit (--memory-limit-mb); it may be "
                "built to overload PDF readers, or raise the limit")
    if status == "crash":
        return f"the PDF crashed the PDF reader (damaged file; its process was {detail})"
    return f"unreadable PDF ({detail})"


def _plan(store: CorpusStore, paths: list[Path], summary: IngestSummary) -> list[_Job]:
    """Decide, per file, whether to skip, ingest or reject it (duplicate id)."""
    jobs: list[_Job] = []
    claimed: dict[str, Path] = {}
    existing = {d.id: d for d in store.documents()}
    for path in paths:
        doc_id = path.stem
        try:
            size = path.stat().st_size
            digest = sha256_file(path)
        except OSError as err:
            _fail(store, summary, path, f"cannot read file ({err.strerror})")
            continue
        if doc_id in claimed:
            _fail(store, summary, path, f"document id {doc_id!r} is already taken by {claimed[doc_id]}; rename one file")
            continue
        claimed[doc_id] = path
        old = existing.get(doc_id)
        if old is not None and old.sha256 == digest:
            summary.skipped += 1
            continue
        if old is not None and old.source_path != str(path):
            _fail(store, summary, path, f"document id {doc_id!r} is already used by {old.source_path}; rename the file")
            continue
        jobs.append(_Job(path, doc_id, digest, size))
    return jobs


def _fail(store: CorpusStore, summary: IngestSummary, path: Path, reason: str, job: _Job | None = None) -> None:
    summary.errors.append({"path": str(path), "reason": reason})
    store.record_error(str(path), reason, job.doc_id if job else None, job.sha256 if job else None)


def _commit(store: CorpusStore, job: _Job, result: DocumentRecord | str, summary: IngestSummary) -> None:
    if isinstance(result, str):
        _fail(store, summary, job.path, result, job)
        return
    target = store.pdf_dir / f"{job.doc_id}.pdf"
    with atomic_path(target) as tmp:
        if result.decrypted is not None:
            tmp.write_bytes(result.decrypted)
            result.decrypted = None
        else:
            shutil.copyfile(job.path, tmp)
    store.add_document(job.doc_id, str(job.path), job.size, result)
    summary.documents += 1
    summary.pages += len(result.pages)
    summary.needs_ocr += sum(1 for p in result.pages if p.ocr_reason)


def ingest(inputs: list[str | Path], corpus: str | Path, config: IngestConfig | None = None,
           progress: Callable[[int, int, int], None] | None = None) -> IngestSummary:
    """Ingest PDFs (files or folders) into the corpus directory, creating it when missing.

    Args:
        inputs: PDF files and/or directories searched recursively for *.pdf.
        corpus: the corpus directory.
        config: password, worker count and OCR hook.
        progress: called as progress(done_files, total_files, pages_so_far) after each file.

    Returns:
        What this run did; bad files are in `errors`, never raised.
    """
    config = config or IngestConfig()
    start = time.perf_counter()
    paths = find_pdfs(inputs)
    if not paths:
        raise DossierError(f"no PDF files found in {', '.join(str(i) for i in inputs)}")
    Path(corpus).mkdir(parents=True, exist_ok=True)
    with _corpus_lock(Path(corpus), config.lock_wait_s):
        return _ingest_locked(paths, corpus, config, progress, start)


@contextlib.contextmanager
def _corpus_lock(corpus: Path, wait_s: float) -> Iterator[None]:
    """Hold the corpus's ingest lock; wait for another ingest (logging its pid), at most `wait_s` seconds.

    Raises:
        DossierError: the other ingest still holds it after `wait_s` (names its pid).
    """
    with open(corpus / LOCK, "a+", encoding="utf-8") as handle:
        deadline, told = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                if time.monotonic() >= deadline:
                    raise DossierError(f"{corpus}: another ingest (pid {holder}) is writing to this corpus; wait for "
                                       "it to finish, or ingest into another corpus") from None
                if not told:
                    log.info("%s: waiting for another ingest (pid %s) writing to this corpus", corpus, holder)
                    told = True
                time.sleep(0.05)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ingest_locked(paths: list[Path], corpus: str | Path, config: IngestConfig, progress, start: float) -> IngestSummary:
    store = CorpusStore(corpus, create=True)
    summary = IngestSummary()
    jobs = _plan(store, paths, summary)
    done = len(paths) - len(jobs)
    if progress:
        progress(done, len(paths), 0)
    workers = min(config.workers or os.cpu_count() or 1, max(len(jobs), 1))
    if len(jobs) <= SMALL_BATCH and not config.workers:
        workers = 1  # starting worker processes costs more than a few small files

    def finished(job: _Job, result: DocumentRecord | str) -> None:
        nonlocal done
        _commit(store, job, result, summary)
        done += 1
        if progress:
            progress(done, len(paths), summary.pages)

    # Every file is read in a worker, even a small batch: only a separate process can be stopped
    # at a deadline while MuPDF is inside one long C call, and a crash there costs one file.
    (store.root / INFLIGHT).unlink(missing_ok=True)
    if jobs:
        _run_pool(jobs, config, workers, finished)
    if config.ocr is not None:
        pending = store.pages_needing_ocr()
        if config.force_ocr:
            ids = {path.stem for path in paths}
            flagged = set(pending)
            pending += [(p.document, p.page) for p in store.iter_pages()
                        if p.document in ids and p.text_source.startswith("ocr:") and (p.document, p.page) not in flagged]
            pending.sort()
        if pending:
            outcome = config.ocr(store, pending)
            summary.ocr_pages, summary.ocr_backend = outcome.pages, outcome.backend
            summary.ocr_errors, summary.ocr_skipped, summary.ocr_seconds = outcome.errors, outcome.skipped, outcome.seconds
    summary.seconds = time.perf_counter() - start
    return summary


def _run_pool(jobs: list[_Job], config: IngestConfig, workers: int, finished) -> None:
    """Extract in bounded worker processes; a PDF that hangs, bloats or crashes its worker fails alone."""
    limits = config.limits
    run_isolated(jobs, _extract_job, (config.password, config.max_page_chars), workers, finished,
                 lambda job, status, detail: _over_limit(status, detail, limits), limits)


def _extract_job(job: _Job, password: str | None, max_page_chars: int) -> DocumentRecord | str:
    return _extract(str(job.path), password, job.sha256, max_page_chars)
