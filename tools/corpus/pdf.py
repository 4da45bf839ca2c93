"""Read one PDF into plain records: metadata, and per page its text layer, words with boxes and size.

Runs in ingest worker processes, so it returns picklable dataclasses and never touches
the database. Every failure a user can meet (not a PDF, truncated, encrypted, no pages, a
page with more text than `max_page_chars`, the worker's memory limit reached) becomes a
`PdfError` whose message is one line a user understands.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools.corpus.worker import memory_exhausted

__all__ = ["PdfError", "PageRecord", "DocumentRecord", "read_pdf", "sha256_file", "text_layer_problem", "open_pdf"]

# A page whose text layer has fewer visible characters than this is flagged for OCR.
MIN_VISIBLE_CHARS = 3
# ... or whose visible characters are mostly undecodable (U+FFFD, private use, control).
MAX_UNDECODABLE_FRACTION = 0.3
# A page with more characters than this makes the document an error: the densest FinanceBench
# page has ~11,000; a hostile one (nested drawings repeated) can have billions.
MAX_PAGE_CHARS = 500_000


_SPACE = re.compile(r"\s")
# U+FFFD, private-use planes and control characters: what broken font encodings extract as.
_UNDECODABLE = re.compile("[\ufffd\ue000-\uf8ff\U000f0000-\U0010ffff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class PdfError(Exception):
    """A PDF that cannot be ingested; the message is a one-line reason for the user."""


@dataclass(slots=True)
class PageRecord:
    """One page's extracted content. Coordinates are PDF points, origin top-left."""

    number: int  # 1-indexed page number
    width: float  # page width in points (after rotation)
    height: float  # page height in points
    text: str  # text layer in reading order
    words: list[str]  # word strings, in reading order
    boxes: np.ndarray  # float32 (n_words, 4): x0, y0, x1, y1 in points
    lines: np.ndarray  # int32 (n_words, 3): block, line, word number (PyMuPDF's reading structure)
    ocr_reason: str | None  # why the text layer is unusable ("no text", ...), None when usable


@dataclass(slots=True)
class DocumentRecord:
    """Everything ingest stores for one PDF."""

    sha256: str
    page_count: int
    metadata: dict[str, str]
    pages: list[PageRecord] = field(default_factory=list)
    decrypted: bytes | None = None  # the PDF without encryption, when it was opened with a password


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def text_layer_problem(text: str) -> str | None:
    """Say why a page's text layer is unusable for search, or None when it is fine.

    Returns:
        "no text" (empty or whitespace only), "undecodable glyphs" (mostly U+FFFD,
        private-use or control characters) or None.
    """
    visible = len(text) - len(_SPACE.findall(text))
    if visible < MIN_VISIBLE_CHARS:
        return "no text"
    if len(_UNDECODABLE.findall(text)) / visible > MAX_UNDECODABLE_FRACTION:
        return "undecodable glyphs"
    return None


def _clean_metadata(raw: dict | None) -> dict[str, str]:
    """Keep non-empty metadata as printable strings (some PDFs carry garbage bytes here)."""
    out: dict[str, str] = {}
    for key, value in (raw or {}).items():
        if value is None:
            continue
        text = "".join(ch for ch in str(value) if ch.isprintable()).strip()
        if text:
            out[key] = text
    return out


def open_pdf(path: str | Path, password: str | None = None):
    """Open a PDF with PyMuPDF, raising `PdfError` with a one-line reason on failure."""
    import pymupdf

    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as err:
        raise PdfError(f"cannot read file ({err.strerror})") from None
    if size == 0:
        raise PdfError("empty file (0 bytes)")
    with open(path, "rb") as fh:
        head = fh.read(1024)
    if b"%PDF" not in head:
        raise PdfError("not a PDF (no %PDF header in the first 1 KB)")
    try:
        doc = pymupdf.open(path, filetype="pdf")
    except Exception as err:  # PyMuPDF raises FileDataError and plain RuntimeErrors
        if "Failed to open" in str(err):
            raise PdfError("damaged or truncated PDF (MuPDF cannot parse its structure)") from None
        raise PdfError(f"unreadable PDF ({_short(err)})") from None
    if doc.needs_pass:
        if password is None:
            doc.close()
            raise PdfError("password-protected: re-run with --password")
        if not doc.authenticate(password):
            doc.close()
            raise PdfError("password-protected: the given --password is wrong")
    if doc.page_count == 0:
        doc.close()
        raise PdfError("the PDF has no readable pages (broken page tree)")
    return doc


def _memory_limit() -> str:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return "no limit set" if soft == resource.RLIM_INFINITY else f"the limit is {soft >> 20} MB per worker"


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:160]


def _read_page(page, number: int, max_chars: int) -> PageRecord:
    import pymupdf

    rect = page.rect
    # one layout pass, with get_text's own flags (clip to the page, keep ligatures/whitespace), serves both
    textpage = page.get_textpage(flags=pymupdf.TEXTFLAGS_TEXT)
    text = page.get_text("text", textpage=textpage)
    if len(text) > max_chars:  # checked before the words: a list of millions of tuples costs more than the text
        raise PdfError(f"page {number} has {len(text):,} characters of text, more than the limit of {max_chars:,} "
                       "per page (--max-page-chars); it may be built to overload PDF readers, or raise the limit")
    # words: (x0, y0, x1, y1, word, block_no, line_no, word_no), in PyMuPDF's reading order
    raw_words = page.get_text("words", sort=False, textpage=textpage)
    if raw_words:
        x0, y0, x1, y1, words, block_no, line_no, word_no = zip(*raw_words)  # column-wise: far cheaper than per row
        boxes = np.array((x0, y0, x1, y1), dtype=np.float32).T.copy()
        lines = np.array((block_no, line_no, word_no), dtype=np.int32).T.copy()
        words = list(words)
    else:
        words, boxes, lines = [], np.zeros((0, 4), np.float32), np.zeros((0, 3), np.int32)
    return PageRecord(number, float(rect.width), float(rect.height), text, words, boxes, lines, text_layer_problem(text))


def read_pdf(path: str | Path, password: str | None = None, sha256: str | None = None,
             max_page_chars: int = MAX_PAGE_CHARS) -> DocumentRecord:
    """Extract a PDF's metadata and every page's text layer, words and size.

    Args:
        path: the PDF file.
        password: used only when the PDF is encrypted.
        sha256: the file's hash when the caller already computed it.
        max_page_chars: a page with more characters of text makes the whole document an error.

    Raises:
        PdfError: the file is empty, not a PDF, damaged, encrypted without the right
            password, has no pages, has a page over `max_page_chars`, or reading it ran out of
            the memory its process may use; the message says which.
    """
    digest = sha256 or sha256_file(path)
    doc = open_pdf(path, password)
    try:
        try:
            metadata = _clean_metadata(doc.metadata)
        except Exception:  # unreadable metadata must not cost the document
            metadata = {}
        record = DocumentRecord(digest, doc.page_count, metadata)
        if (doc.metadata or {}).get("encryption"):
            import pymupdf

            # The stored copy is decrypted so pages render later without the password.
            record.decrypted = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_NONE)
        for index in range(doc.page_count):
            try:
                record.pages.append(_read_page(doc.load_page(index), index + 1, max_page_chars))
            except PdfError:
                raise
            except Exception as err:  # one damaged page must not cost the document: keep it, flag it
                if memory_exhausted(err):  # not damage: the page needs more memory than the worker may use
                    raise PdfError(f"reading page {index + 1} ran out of memory ({_memory_limit()}); it may be "
                                   "built to overload PDF readers (--memory-limit-mb raises the limit)") from None
                empty = np.zeros((0, 4), np.float32)
                reason = f"damaged page ({_short(err)})"
                record.pages.append(PageRecord(index + 1, 0.0, 0.0, "", [], empty, np.zeros((0, 3), np.int32), reason))
        return record
    finally:
        doc.close()
