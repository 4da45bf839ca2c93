"""`dossier ingest` and the `dossier corpus` group (list, errors, show, render)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import CorpusOpt, FormatOpt, OcrChoice, OcrOpt, OutputFormat, emit_json

__all__ = ["register"]

corpus_app = typer.Typer(help="Inspect a corpus store: documents, ingest errors, pages.", no_args_is_help=True)


def ingest_cmd(
    inputs: Annotated[list[Path], typer.Argument(help="PDF files and/or folders (searched recursively for *.pdf).")],
    corpus: CorpusOpt,
    password: Annotated[str | None, typer.Option(help="Password for encrypted PDFs (tried on each encrypted file).")] = None,
    workers: Annotated[int, typer.Option(help="Extraction and OCR processes; 0 = one per CPU core.")] = 0,
    ocr: OcrOpt = OcrChoice.auto,
    force_ocr: Annotated[bool, typer.Option(
        "--force-ocr", help="Also re-read the pages of these PDFs that OCR read before (e.g. with another --ocr backend).")] = False,
    ocr_dpi: Annotated[int, typer.Option(help="Resolution pages are rendered at for OCR (small pages get more).")] = 150,
    ocr_language: Annotated[str, typer.Option(help="tesseract language(s), e.g. eng or eng+deu.")] = "eng",
    metadata: Annotated[Path | None, typer.Option(
        help="JSONL of document metadata, one object per document: {\"document\": id, \"company\": ..., "
             "\"year\": ...}; stored in the corpus for metadata filters (the workflow agent).")] = None,
    doc_timeout: Annotated[float, typer.Option(
        help="Seconds one document's text may take to read; a slower one is recorded as an error "
             "(a 300-page 10-K takes under 1 s).")] = 120.0,
    ocr_timeout: Annotated[float, typer.Option(
        help="Seconds OCR may take to draw and read one page; a slower page is recorded as an error.")] = 120.0,
    memory_limit_mb: Annotated[int, typer.Option(
        help="Memory (address space, MiB) each extraction or OCR worker process may use; a document or page "
             "that needs more is recorded as an error. 0 = no limit.")] = 4096,
    max_page_chars: Annotated[int, typer.Option(
        help="Characters of text one page may hold; a document with a page beyond it is recorded as an error.")] = 500_000,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Ingest PDFs into a corpus store (SQLite + copies of the PDFs), OCR pages without text; safe to re-run.

    Each document is written in one transaction: an interrupted ingest keeps every finished
    document, and re-running skips files already stored (same sha256) and completes the rest.
    Bad files (empty, truncated, not a PDF, encrypted without --password) are listed as
    errors and never stop the batch; the exit code is 0 when at least one document was
    ingested or was already present. Pages without a usable text layer are then read by OCR
    in parallel (--ocr, default auto); a page OCR fails on is listed and stays flagged, and
    the next ingest retries it. --metadata stores each document's fields (company, year,
    report type...); a bad line or an unknown document is listed and skipped. Rebuild the
    index afterwards (`dossier index`).

    Every document is read in a worker process with limits (--doc-timeout, --memory-limit-mb,
    --max-page-chars; OCR: --ocr-timeout per page): a PDF built to hang or exhaust a PDF reader
    is recorded as an error naming the limit, and the batch goes on.

    Example:
        $ dossier ingest demo/sample/pdfs --corpus demo/corpus
        ingested 6 documents, 14 pages in 1.9 s (7 pages/s); 0 skipped, 0 errors
          1 page has no usable text layer and flagged for OCR
          OCR (tesseract): read 1 page in 1.4 s (0.7 pages/s), 0 failed
        corpus demo/corpus: 6 documents, 14 pages
    """
    from tools.corpus import IngestConfig, ingest, read_metadata_file
    from tools.ocr import OcrSettings, OcrStep, backend_status, resolve_backend

    fields = read_metadata_file(metadata) if metadata is not None else None  # a bad file fails before ingesting

    settings = OcrSettings(backend=ocr.value, dpi=ocr_dpi, workers=workers, language=ocr_language,
                           timeout_s=ocr_timeout, memory_mb=memory_limit_mb)
    if ocr is not OcrChoice.auto:
        resolve_backend(ocr.value)  # a backend asked for by name must be usable: fail before ingesting
    config = IngestConfig(password=password, workers=workers, force_ocr=force_ocr, doc_timeout_s=doc_timeout,
                          memory_mb=memory_limit_mb, max_page_chars=max_page_chars)
    if fmt is OutputFormat.json:
        if ocr is not OcrChoice.none:
            config.ocr = OcrStep(settings)
        summary = ingest(inputs, corpus, config)
    else:
        summary = _ingest_with_progress(inputs, corpus, config, None if ocr is OcrChoice.none else settings)
    from tools.corpus import CorpusStore

    store = CorpusStore(corpus)
    report = summary.to_json(store)
    if fields is not None:
        rows, problems = fields
        problems += store.set_metadata(rows, str(metadata))
        stored = len(rows) - sum(1 for p in problems if "document" in p)
        names = sorted({key for doc, row in rows.items() for key in row})
        report["metadata"] = {"documents": stored, "fields": names, "problems": problems}
    if fmt is OutputFormat.json:
        emit_json(report)
    else:
        typer.echo(
            f"ingested {summary.documents} documents, {summary.pages} pages in {summary.seconds:.1f} s "
            f"({summary.pages_per_second:.0f} pages/s); {summary.skipped} skipped, {len(summary.errors)} errors"
        )
        for err in summary.errors:
            typer.echo(f"  error: {err['path']}: {err['reason']}")
        if summary.needs_ocr:
            noun = "page has" if summary.needs_ocr == 1 else "pages have"
            typer.echo(f"  {summary.needs_ocr} {noun} no usable text layer and flagged for OCR")
        if summary.ocr_backend:
            read = summary.ocr_pages
            rate = read / summary.ocr_seconds if summary.ocr_seconds > 0 else 0.0
            typer.echo(f"  OCR ({summary.ocr_backend}): read {read} page{'s' if read != 1 else ''} in "
                       f"{summary.ocr_seconds:.1f} s ({rate:.1f} pages/s), {len(summary.ocr_errors)} failed")
            for err in summary.ocr_errors:
                typer.echo(f"  error: {err['document']} page {err['page']}: {err['reason']}")
        if summary.ocr_skipped:
            why = "; ".join(f"{name}: {reason}" for name, reason in backend_status().items() if reason)
            noun = "page" if summary.ocr_skipped == 1 else "pages"
            typer.echo(f"  {summary.ocr_skipped} {noun} left flagged: no OCR backend is usable ({why})")
        elif ocr is OcrChoice.none and store.stats()["pages_needing_ocr"]:
            flagged = store.stats()["pages_needing_ocr"]
            typer.echo(f"  OCR skipped (--ocr none): {flagged} {'page stays' if flagged == 1 else 'pages stay'} flagged")
        if "metadata" in report:
            meta = report["metadata"]
            typer.echo(f"  metadata: {meta['documents']} documents ({', '.join(meta['fields']) or 'no fields'}), "
                        f"{len(meta['problems'])} skipped")
            for problem in meta["problems"]:
                where = f"line {problem['line']}" if "line" in problem else problem["document"]
                typer.echo(f"  skipped {metadata}: {where}: {problem['reason']}")
        typer.echo(f"corpus {corpus}: {report['corpus']['documents']} documents, {report['corpus']['pages']} pages")
    if summary.documents == 0 and summary.skipped == 0:
        raise typer.Exit(1)  # every file failed (or none was found)


def _ingest_with_progress(inputs, corpus, config, ocr_settings):
    """Ingest with a bar on a terminal, or a plain progress line every 5 s in a log (tools/progress.py)."""
    import time

    from tools.progress import LiveProgress
    from tools.corpus import ingest
    from tools.ocr import OcrStep

    with LiveProgress("ingest") as live:
        live.phase("documents")
        state = {"start": None, "ocr_start": None}

        def progress(done: int, total: int, pages: int) -> None:
            state["start"] = state["start"] or time.perf_counter()
            elapsed = max(time.perf_counter() - state["start"], 1e-9)
            live.update(done=done, total=total, detail=f"{done / elapsed:.1f} docs/s, {pages / elapsed:.0f} pages/s")

        def ocr_progress(done: int, total: int, backend: str) -> None:
            if state["ocr_start"] is None:
                state["ocr_start"] = time.perf_counter()
                live.phase(f"OCR ({backend}), pages")
            elapsed = max(time.perf_counter() - state["ocr_start"], 1e-9)
            live.update(done=done, total=total, detail=f"{done / elapsed:.2f} pages/s")

        if ocr_settings is not None:
            config.ocr = OcrStep(ocr_settings, progress=ocr_progress)
        return ingest(inputs, corpus, config, progress)


@corpus_app.command("list")
def list_cmd(corpus: CorpusOpt, fmt: FormatOpt = OutputFormat.human) -> None:
    """List the documents of a corpus with their page counts and status.

    Example:
        $ dossier corpus list --corpus corpus
        3M_2018_10K      160 pages  ok
        scanned-memo       1 page   needs_ocr
    """
    from tools.corpus import CorpusStore

    docs = CorpusStore(corpus).documents()
    if fmt is OutputFormat.json:
        fields = CorpusStore(corpus).document_metadata()
        emit_json([{"id": d.id, "pages": d.page_count, "status": d.status, "sha256": d.sha256,
                    "source_path": d.source_path, "metadata": d.metadata, "fields": fields.get(d.id, {})}
                   for d in docs])
        return
    width = max((len(d.id) for d in docs), default=10)
    for d in docs:
        typer.echo(f"{d.id:<{width}}  {d.page_count:>5} page{'s' if d.page_count != 1 else ' '}  {d.status}")
    typer.echo(f"{len(docs)} documents, {sum(d.page_count for d in docs)} pages")


@corpus_app.command("errors")
def errors_cmd(corpus: CorpusOpt, fmt: FormatOpt = OutputFormat.human) -> None:
    """List the files that could not be ingested, with the reason.

    Example:
        $ dossier corpus errors --corpus corpus
        /data/invalid.pdf: unreadable PDF (Failed to open file as type pdf.)
        /data/secret.pdf: password-protected: re-run with --password
    """
    from tools.corpus import CorpusStore

    errors = CorpusStore(corpus).errors()
    if fmt is OutputFormat.json:
        emit_json([{"path": e.source_path, "reason": e.reason} for e in errors])
        return
    for e in errors:
        typer.echo(f"{e.source_path}: {e.reason}")
    typer.echo(f"{len(errors)} errors", err=True)


@corpus_app.command("show")
def show_cmd(
    corpus: CorpusOpt,
    document: Annotated[str, typer.Argument(help="Document id (the PDF's file stem).")],
    page: Annotated[int, typer.Argument(help="1-indexed page number.")],
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Print one page's text and where it came from (text layer or OCR).

    Example:
        $ dossier corpus show --corpus corpus 3M_2018_10K 60
        3M_2018_10K page 60 (612×792 pt, text from pdf)
        Table of Contents 3M Company and Subsidiaries ...
    """
    from tools.corpus import CorpusStore

    info = CorpusStore(corpus).page(document, page)
    if fmt is OutputFormat.json:
        emit_json({"document": info.document, "page": info.page, "width": info.width, "height": info.height,
                   "text_source": info.text_source, "needs_ocr": info.needs_ocr, "ocr_reason": info.ocr_reason,
                   "text": info.text})
        return
    source = f"text from {info.text_source}" + (f"; flagged for OCR: {info.ocr_reason}" if info.needs_ocr else "")
    typer.echo(f"{info.document} page {info.page} ({info.width:.0f}×{info.height:.0f} pt, {source})")
    typer.echo(info.text)


@corpus_app.command("render")
def render_cmd(
    corpus: CorpusOpt,
    document: Annotated[str, typer.Argument(help="Document id.")],
    page: Annotated[int, typer.Argument(help="1-indexed page number.")],
    out: Annotated[Path, typer.Option(help="PNG file to write.")],
    dpi: Annotated[int, typer.Option(help="Resolution in dots per inch.")] = 150,
    max_pixels: Annotated[int, typer.Option(help="Cap on width×height; huge pages are scaled down to fit.")] = 4_000_000,
) -> None:
    """Render a page to PNG (cached in the corpus), scaled down to fit the pixel cap.

    Example:
        $ dossier corpus render --corpus corpus 3M_2018_10K 60 --out page.png
        wrote page.png (1275×1650 px)
    """
    from tools.corpus import CorpusStore, RenderSettings

    image = CorpusStore(corpus).render(document, page, RenderSettings(dpi, max_pixels))
    image.save(out)
    typer.echo(f"wrote {out} ({image.width}×{image.height} px)")


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
    app.add_typer(corpus_app, name="corpus")

