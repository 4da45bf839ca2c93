"""DocVQA-2026 (ICDAR 2026, VLR-CVC) questions in the canonical format, and its page images as PDFs.

The competition publishes one record per document (`val.parquet` on the Hugging Face hub,
described in github.com/VLR-CVC/DocVQA2026):

    {"doc_id": "maps_2", "doc_category": "maps", "document": [<page image>, ...],
     "questions": {"question_id": ["maps_2_q1", ...], "question": ["By which kind of road ...", ...]},
     "answers":   {"question_id": ["maps_2_q1", ...], "answer": ["Macadam & Gravel", ...]}}

Earlier versions of its card wrote `questions`/`answers` as lists of {"question_id", "question"}
objects; both shapes are read. The test split has no answers (the questions get no answer
variants). An answer may be a Python list literal ("['A', 'B']"): the competition's evaluator
accepts any of its items, so each becomes one answer variant. Questions point to one document
(`extra["document"]` = doc_id) and have no gold pages. Accepted sources: the parquet file (needs
pyarrow), a JSON list or JSON Lines file of such records.

With `pdfs`, every document's page images are written as one image-only PDF
`PDFS/<doc_id>.pdf` (one page per image, at 150 dpi), so `dossier ingest` (which OCRs them)
and every agent see the document. Images come from the record (bytes, or a path relative to
the source file). A document whose PDF exists already is not written again.
"""

from __future__ import annotations

import ast
import base64
import io
from collections.abc import Iterator
from pathlib import Path

from engine.datasets.formats import LineError, Question, iter_json_records
from tools.atomic import atomic_path
from tools.errors import DossierError, missing_dependency

__all__ = ["import_docvqa2026", "answer_variants"]

PAGE_DPI = 150  # the page size written into a PDF: an image of W px is W / 150 inches wide


def answer_variants(answer: object) -> list[list[str]]:
    """The accepted answers of one item: a list literal gives one variant per element (as the evaluator)."""
    if answer is None:
        return []
    if isinstance(answer, list):
        return [[str(a)] for a in answer]
    text = str(answer)
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return [[text]]
    if isinstance(parsed, list) and parsed:
        return [[str(a)] for a in parsed]
    return [[text]]


def _columns(value: object, keys: tuple[str, ...], where: str) -> list[dict]:
    """Rows from the columnar shape {"question_id": [...], ...} or a list of row objects."""
    if value is None:
        return []
    if isinstance(value, dict):
        columns = [value.get(k) for k in keys]
        if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns}) != 1:
            raise DossierError(f"{where}: expected {{{', '.join(repr(k) for k in keys)}}} as lists of equal length")
        return [dict(zip(keys, row)) for row in zip(*columns)]
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    raise DossierError(f"{where}: expected a list of objects or columns {', '.join(keys)}, got {type(value).__name__}")


def _questions(record: object, where: str) -> list[Question]:
    if not isinstance(record, dict):
        raise DossierError(f"{where}: expected a JSON object (one document), got {type(record).__name__}")
    for key in ("doc_id", "questions"):
        if key not in record:
            raise DossierError(f"{where}: missing field {key!r} (is this a DocVQA-2026 file?)")
    doc = str(record["doc_id"])
    category = str(record.get("doc_category") or "unknown")
    answers = {str(a.get("question_id")): a.get("answer")
               for a in _columns(record.get("answers"), ("question_id", "answer"), f"{where}: answers")}
    out = []
    for row in _columns(record["questions"], ("question_id", "question"), f"{where}: questions"):
        qid, text = row.get("question_id"), row.get("question")
        if qid is None or not isinstance(text, str) or not text.strip():
            raise DossierError(f"{where}: a question of {doc!r} lacks question_id or question text")
        extra = {"document": doc, "document_category": category, "category": category, "domain": category,
                 "source": "docvqa2026"}
        out.append(Question(str(qid), text.strip(), answer_variants(answers.get(str(qid))), [], extra))
    return out


def _records(source: Path, errors: list[LineError]) -> Iterator[tuple[int, object]]:
    """(record number, record) from a parquet, JSON list or JSONL file."""
    if not source.is_file():
        raise DossierError(f"{source}: no such file")
    if source.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as err:
            raise missing_dependency("pyarrow (DocVQA-2026 parquet files)", "pip install 'dossier[docvqa]'") from err
        number = 0
        for batch in pq.ParquetFile(source).iter_batches(batch_size=1):  # one document at a time: ~1 GB of images
            for record in batch.to_pylist():
                number += 1
                yield number, record
        return
    for where, record in iter_json_records(source, errors):
        yield int(where.split()[-1]), record


def _image_bytes(page: object, base: Path, where: str) -> bytes:
    """The encoded image of one page entry: {"bytes", "path"}, raw bytes, a data URL or a path."""
    if isinstance(page, dict):
        if page.get("bytes"):
            return bytes(page["bytes"])
        page = page.get("path")
    if isinstance(page, (bytes, bytearray)):
        return bytes(page)
    if isinstance(page, str):
        if page.startswith("data:image/"):
            return base64.b64decode(page.split(",", 1)[1])
        path = Path(page) if Path(page).is_absolute() else base / page
        if path.is_file():
            return path.read_bytes()
        raise DossierError(f"{where}: page image {page!r} not found (looked in {base})")
    raise DossierError(f"{where}: a page image must be bytes, a data URL or a path, got {type(page).__name__}")


def _write_pdf(record: dict, base: Path, path: Path, where: str) -> int:
    """One image-only PDF page per page image; returns the page count. Written atomically."""
    import pymupdf
    from PIL import Image

    pages = record.get("document")
    if not isinstance(pages, list) or not pages:
        raise DossierError(f"{where}: document {record.get('doc_id')!r} has no page images ('document' is empty)")
    doc = pymupdf.open()
    for number, page in enumerate(pages, start=1):
        data = _image_bytes(page, base, f"{where}: page {number}")
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                if image.format not in ("PNG", "JPEG"):  # PDF pages embed PNG or JPEG as they are
                    buffer = io.BytesIO()
                    image.convert("RGB").save(buffer, format="PNG")
                    data = buffer.getvalue()
        except Exception as err:
            raise DossierError(f"{where}: page {number} is not a readable image ({err})") from None
        sheet = doc.new_page(width=width * 72 / PAGE_DPI, height=height * 72 / PAGE_DPI)
        sheet.insert_image(sheet.rect, stream=data)
    doc.set_metadata({"title": str(record.get("doc_id")), "producer": "dossier import docvqa2026"})
    with atomic_path(path) as tmp:
        doc.save(tmp, garbage=3, deflate=True)
    doc.close()
    return len(pages)


def import_docvqa2026(source: str | Path, pdfs: str | Path | None = None) -> tuple[list[Question], list[LineError], dict]:
    """Read DocVQA-2026 records as canonical questions; optionally write each document as a PDF.

    Args:
        source: val.parquet (or a test split), or a JSON list / JSON Lines export of its records.
        pdfs: folder for `<doc_id>.pdf`; None writes no PDFs.

    Returns:
        (questions, errors, {"documents": records read, "pdfs_written": n, "pdfs_kept": n, "pages": n}).
        A bad record (or a document whose images cannot be written) is an error with its record
        number; the other records are still imported.
    """
    source = Path(source)
    errors: list[LineError] = []
    questions: list[Question] = []
    seen: set[str] = set()
    info = {"documents": 0, "pdfs_written": 0, "pdfs_kept": 0, "pages": 0}
    folder = Path(pdfs) if pdfs is not None else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    for number, record in _records(source, errors):
        where = f"{source}:{number}"
        try:
            items = _questions(record, where)
            if folder is not None:
                path = folder / f"{record['doc_id']}.pdf"
                if path.is_file():
                    info["pdfs_kept"] += 1
                else:
                    info["pages"] += _write_pdf(record, source.parent, path, where)
                    info["pdfs_written"] += 1
        except DossierError as err:
            errors.append(LineError(str(source), number, str(err).split(": ", 1)[-1]))
            continue
        info["documents"] += 1
        for question in items:
            if question.id in seen:
                errors.append(LineError(str(source), number, f"duplicate question id {question.id!r}"))
                continue
            seen.add(question.id)
            questions.append(question)
    return questions, errors, info
