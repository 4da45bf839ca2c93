"""The corpus store: an SQLite database of documents, pages and words beside copies of the source PDFs.

Layout of a corpus directory:
    dossier.sqlite      documents, pages, words (boxes as float32 blobs), errors
    pdfs/{id}.pdf       the source PDFs, copied in (so the store is self-contained)
    renders/{id}/...    page images rendered on demand (see render.py)
    index/              search indexes (tools/search)

Every document is written in one transaction, so a crash or kill never leaves a
half-ingested document. Reads are safe from many threads (one connection per thread).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from PIL import Image

from tools.corpus.pdf import DocumentRecord
from tools.corpus.render import PageRenderer, RenderSettings, cache_file, render_page
from tools.errors import DossierError

__all__ = ["CorpusStore", "DocumentInfo", "PageInfo", "PageWords", "IngestError", "DB_NAME"]

DB_NAME = "dossier.sqlite"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,
    source_path TEXT NOT NULL,     -- where the PDF was ingested from
    sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    page_count INTEGER NOT NULL,
    metadata TEXT NOT NULL,        -- JSON object (PDF metadata)
    status TEXT NOT NULL,          -- 'ok' or 'needs_ocr' (some pages have no usable text layer)
    ingested_at REAL NOT NULL      -- unix time
);
CREATE TABLE IF NOT EXISTS pages (
    document TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    page INTEGER NOT NULL,         -- 1-indexed
    width REAL NOT NULL,           -- points
    height REAL NOT NULL,          -- points
    text TEXT NOT NULL,
    text_source TEXT NOT NULL,     -- 'pdf' (text layer) or 'ocr:<backend>'
    needs_ocr INTEGER NOT NULL,    -- 1 when the text layer is unusable and no OCR has replaced it
    ocr_reason TEXT,               -- why the text layer is unusable
    PRIMARY KEY (document, page)
);
CREATE TABLE IF NOT EXISTS words (
    document TEXT NOT NULL,
    page INTEGER NOT NULL,
    words TEXT NOT NULL,           -- JSON list of strings, reading order
    boxes BLOB NOT NULL,           -- float32 (n, 4): x0, y0, x1, y1 in points, origin top-left
    lines BLOB NOT NULL,           -- int32 (n, 3): block, line, word number
    confidences BLOB,              -- float32 (n,) OCR confidence, NULL for text-layer words
    PRIMARY KEY (document, page),
    FOREIGN KEY (document, page) REFERENCES pages(document, page) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS errors (
    source_path TEXT PRIMARY KEY,
    document TEXT,
    sha256 TEXT,
    reason TEXT NOT NULL,
    at REAL NOT NULL
);
"""

# Created on first use, so corpora made before metadata existed get it too.
_METADATA_SCHEMA = """
CREATE TABLE IF NOT EXISTS document_metadata (
    document TEXT PRIMARY KEY,     -- a document id (kept when the document is re-ingested)
    fields TEXT NOT NULL,          -- JSON object: company, year, report type... (`dossier ingest --metadata`)
    source TEXT NOT NULL,          -- the metadata file it came from
    updated_at REAL NOT NULL       -- unix time
);
"""


@dataclass(slots=True, frozen=True)
class DocumentInfo:
    id: str
    source_path: str
    sha256: str
    size_bytes: int
    page_count: int
    metadata: dict
    status: str
    ingested_at: float


@dataclass(slots=True, frozen=True)
class PageInfo:
    document: str
    page: int  # 1-indexed
    width: float  # points
    height: float  # points
    text: str
    text_source: str  # 'pdf' or 'ocr:<backend>'
    needs_ocr: bool
    ocr_reason: str | None


@dataclass(slots=True, frozen=True)
class PageWords:
    words: list[str]
    boxes: np.ndarray  # float32 (n, 4) points: x0, y0, x1, y1
    lines: np.ndarray  # int32 (n, 3) block, line, word
    confidences: np.ndarray | None  # float32 (n,) for OCR words


@dataclass(slots=True, frozen=True)
class IngestError:
    source_path: str
    document: str | None
    sha256: str | None
    reason: str
    at: float


class CorpusStore:
    """A corpus directory. Open an existing one with `CorpusStore(path)`; ingest creates it.

    Args:
        root: the corpus directory.
        create: create the directory and database when missing (ingest does this).

    Raises:
        DossierError: `root` is not a corpus and `create` is False.
    """

    def __init__(self, root: str | Path, create: bool = False):
        self.root = Path(root)
        self.db_path = self.root / DB_NAME
        if not self.db_path.is_file():
            if not create:
                hint = "run `dossier ingest PDF_OR_DIR --corpus DIR` first"
                raise DossierError(f"{self.root} is not a corpus (no {DB_NAME}); {hint}")
            self.root.mkdir(parents=True, exist_ok=True)
        if create:
            self.pdf_dir.mkdir(exist_ok=True)
        self._local = threading.local()
        self._renderer: PageRenderer | None = None  # draws pages in bounded workers, started at the first render
        self._renderer_lock = threading.Lock()
        if create:
            self.db.executescript(_SCHEMA)  # idempotent; executescript commits on its own
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        else:
            self.db  # noqa: B018 -- a damaged database fails here, with its name, not at the first query

    # -- connections -------------------------------------------------------------------------
    @property
    def pdf_dir(self) -> Path:
        return self.root / "pdfs"

    @property
    def db(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.db_path, timeout=60, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the header and the schema
            except sqlite3.DatabaseError as err:
                conn.close()
                raise DossierError(f"{self.db_path} is not a readable corpus database ({err}); it is damaged or not "
                                   "a Dossier corpus: rebuild it with `dossier ingest PDF_OR_DIR --corpus DIR` into a "
                                   "new DIR, or give --corpus another corpus") from None
            self._local.conn = conn
        return conn

    def transaction(self):
        """Context manager: BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception."""
        return _Transaction(self.db)

    # -- writes ------------------------------------------------------------------------------
    def add_document(self, doc_id: str, source_path: str, size_bytes: int, record: DocumentRecord) -> None:
        """Insert (or replace) one document with all its pages and words, atomically."""
        status = "needs_ocr" if any(p.ocr_reason for p in record.pages) else "ok"
        with self.transaction() as db:
            db.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
            db.execute(
                "INSERT INTO documents VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (doc_id, source_path, record.sha256, size_bytes, record.page_count,
                 json.dumps(record.metadata, ensure_ascii=False), status, time.time()),
            )
            db.executemany(
                "INSERT INTO pages VALUES (?, ?, ?, ?, ?, 'pdf', ?, ?)",
                [(doc_id, p.number, p.width, p.height, p.text, int(p.ocr_reason is not None), p.ocr_reason)
                 for p in record.pages],
            )
            db.executemany(
                "INSERT INTO words VALUES (?, ?, ?, ?, ?, NULL)",
                [(doc_id, p.number, json.dumps(p.words, ensure_ascii=False),
                  np.ascontiguousarray(p.boxes, np.float32).tobytes(),
                  np.ascontiguousarray(p.lines, np.int32).tobytes()) for p in record.pages],
            )
            db.execute("DELETE FROM errors WHERE source_path = ?", (source_path,))

    def replace_page_text(self, doc_id: str, page: int, text: str, words: list[str], boxes: np.ndarray,
                          source: str, lines: np.ndarray | None = None,
                          confidences: np.ndarray | None = None) -> None:
        """Replace a page's text and words (the OCR hook: `source` is e.g. 'ocr:rapidocr')."""
        self.page(doc_id, page)  # validates
        boxes = np.ascontiguousarray(boxes, np.float32).reshape(-1, 4)
        if lines is None:  # one block, one line per word run: reading order is the list order
            lines = np.zeros((len(words), 3), np.int32)
            lines[:, 2] = np.arange(len(words))
        conf = None if confidences is None else np.ascontiguousarray(confidences, np.float32).tobytes()
        with self.transaction() as db:
            db.execute("UPDATE pages SET text = ?, text_source = ?, needs_ocr = 0 WHERE document = ? AND page = ?",
                       (text, source, doc_id, page))
            db.execute(
                "UPDATE words SET words = ?, boxes = ?, lines = ?, confidences = ? WHERE document = ? AND page = ?",
                (json.dumps(words, ensure_ascii=False), boxes.tobytes(),
                 np.ascontiguousarray(lines, np.int32).tobytes(), conf, doc_id, page),
            )
            remaining = db.execute("SELECT COUNT(*) FROM pages WHERE document = ? AND needs_ocr = 1",
                                   (doc_id,)).fetchone()[0]
            db.execute("UPDATE documents SET status = ? WHERE id = ?", ("needs_ocr" if remaining else "ok", doc_id))

    def set_metadata(self, rows: dict[str, dict], source: str) -> list[dict]:
        """Store the metadata fields of documents (replacing earlier fields), all in one transaction.

        Returns:
            a problem {"document", "reason"} for each row whose document is not in the corpus (not stored).
        """
        known = {d.id for d in self.documents()}
        problems = [{"document": doc, "reason": f"document {doc!r} is not in the corpus{self._suggest(doc)}"}
                    for doc in rows if doc not in known]
        self._ensure_metadata_table()
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO document_metadata VALUES (?, ?, ?, ?)",
                           [(doc, json.dumps(fields, ensure_ascii=False), source, time.time())
                            for doc, fields in rows.items() if doc in known])
        return problems

    def document_metadata(self) -> dict[str, dict]:
        """Metadata fields of every document that has some, by document id (empty when none was stored)."""
        self._ensure_metadata_table()
        rows = self.db.execute("SELECT m.document, m.fields FROM document_metadata m JOIN documents d "
                               "ON d.id = m.document ORDER BY m.document").fetchall()
        return {doc: json.loads(fields) for doc, fields in rows}

    def _ensure_metadata_table(self) -> None:
        self.db.executescript(_METADATA_SCHEMA)

    def record_error(self, source_path: str, reason: str, doc_id: str | None = None, sha256: str | None = None) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO errors VALUES (?, ?, ?, ?, ?)",
                       (source_path, doc_id, sha256, reason, time.time()))

    # -- reads -------------------------------------------------------------------------------
    def documents(self) -> list[DocumentInfo]:
        rows = self.db.execute("SELECT * FROM documents ORDER BY id").fetchall()
        return [_document(row) for row in rows]

    def document(self, doc_id: str) -> DocumentInfo:
        """Look up a document.

        Raises:
            DossierError: no document has this id (the message lists near matches).
        """
        row = self.db.execute("SELECT * FROM documents WHERE id = ?", (doc_id,)).fetchone()
        if row is None:
            raise DossierError(f"unknown document {doc_id!r} in corpus {self.root}{self._suggest(doc_id)}")
        return _document(row)

    def document_by_sha(self, sha256: str) -> DocumentInfo | None:
        row = self.db.execute("SELECT * FROM documents WHERE sha256 = ? LIMIT 1", (sha256,)).fetchone()
        return None if row is None else _document(row)

    def page(self, doc_id: str, page: int) -> PageInfo:
        """One page's text and size.

        Raises:
            DossierError: unknown document, or the page does not exist.
        """
        row = self.db.execute("SELECT * FROM pages WHERE document = ? AND page = ?", (doc_id, page)).fetchone()
        if row is None:
            info = self.document(doc_id)
            raise DossierError(f"page {page} does not exist in {doc_id!r} (it has {info.page_count} pages)")
        return PageInfo(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]), row[7])

    def page_words(self, doc_id: str, page: int) -> PageWords:
        row = self.db.execute("SELECT words, boxes, lines, confidences FROM words WHERE document = ? AND page = ?",
                              (doc_id, page)).fetchone()
        if row is None:
            self.page(doc_id, page)  # raises the right error
            raise AssertionError("page without a words row")
        conf = None if row[3] is None else np.frombuffer(row[3], np.float32)
        return PageWords(json.loads(row[0]), np.frombuffer(row[1], np.float32).reshape(-1, 4),
                         np.frombuffer(row[2], np.int32).reshape(-1, 3), conf)

    def iter_pages(self) -> Iterator[PageInfo]:
        """Every page of every document, ordered by document id then page number."""
        cursor = self.db.execute("SELECT * FROM pages ORDER BY document, page")
        for row in cursor:
            yield PageInfo(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]), row[7])

    def pages_needing_ocr(self) -> list[tuple[str, int]]:
        rows = self.db.execute("SELECT document, page FROM pages WHERE needs_ocr = 1 ORDER BY document, page")
        return [(r[0], r[1]) for r in rows]

    def errors(self) -> list[IngestError]:
        rows = self.db.execute("SELECT * FROM errors ORDER BY source_path").fetchall()
        return [IngestError(*row) for row in rows]

    def stats(self) -> dict:
        db = self.db
        return {
            "documents": db.execute("SELECT COUNT(*) FROM documents").fetchone()[0],
            "pages": db.execute("SELECT COUNT(*) FROM pages").fetchone()[0],
            "pages_needing_ocr": db.execute("SELECT COUNT(*) FROM pages WHERE needs_ocr = 1").fetchone()[0],
            "errors": db.execute("SELECT COUNT(*) FROM errors").fetchone()[0],
        }

    def fingerprint(self) -> str:
        """Changes whenever any document or page text changes (indexes record it to detect staleness)."""
        row = self.db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(text)), 0), COALESCE(GROUP_CONCAT(text_source, ''), '') FROM pages"
        ).fetchone()
        shas = self.db.execute("SELECT GROUP_CONCAT(sha256, ',') FROM (SELECT sha256 FROM documents ORDER BY id)").fetchone()[0]
        import hashlib

        return hashlib.sha256(f"{row[0]}|{row[1]}|{row[2]}|{shas}".encode()).hexdigest()[:16]

    def pdf_path(self, doc_id: str) -> Path:
        """The stored copy of a document's PDF."""
        self.document(doc_id)
        return self.pdf_dir / f"{doc_id}.pdf"

    def render(self, doc_id: str, page: int, settings: RenderSettings | None = None) -> Image.Image:
        """Render a page (1-indexed) to an RGB image, cached under renders/{doc_id}/.

        Drawing runs in a worker process under `settings.timeout_s` and `settings.memory_mb`
        (tools/corpus/render.py), so a hostile page fails instead of hanging the caller.

        Raises:
            DossierError: unknown document or page.
            RenderLimitError: the page exceeded the render time or memory limit, or crashed the renderer.
        """
        self.page(doc_id, page)
        with self._renderer_lock:
            if self._renderer is None:
                self._renderer = PageRenderer()
        return render_page(self.pdf_dir / f"{doc_id}.pdf", page, settings or RenderSettings(),
                           self.root / "renders" / doc_id, renderer=self._renderer)

    def render_file(self, doc_id: str, page: int, settings: RenderSettings | None = None) -> Path:
        """The cached PNG of a rendered page, rendering it first when it is not cached (a web server sends it as is).

        Raises:
            DossierError: unknown document or page.
        """
        settings = settings or RenderSettings()
        self.page(doc_id, page)
        path = cache_file(self.root / "renders" / doc_id, page, settings)
        if not path.is_file():
            self.render(doc_id, page, settings)
        return path

    def _suggest(self, doc_id: str) -> str:
        import difflib

        ids = [r[0] for r in self.db.execute("SELECT id FROM documents")]
        close = difflib.get_close_matches(doc_id, ids, n=3)
        return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else f" ({len(ids)} documents; see `dossier corpus list`)"

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        with self._renderer_lock:
            renderer, self._renderer = self._renderer, None
        if renderer is not None:
            renderer.close()


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


def _document(row) -> DocumentInfo:
    return DocumentInfo(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), row[6], row[7])
