"""OCR of PDF pages: render at a resolution fit for OCR, read, map the words back to PDF points.

`ocr_pdf_page` reads one page; `OcrStep` is ingest's OCR hook: it reads the pages flagged for
OCR in parallel worker processes and writes each page's words into the corpus store as soon
as it is read (`text_source = 'ocr:<backend>'`), so an interrupted run keeps what it did. A
page that fails is recorded in the store's errors (`<pdf>#page=N`) with the reason, stays
flagged, and is retried by the next ingest; it never stops the batch.

Pages are drawn only in bounded worker processes (tools/corpus/worker.py: `timeout_s` per
page, `memory_mb` per process): with several workers each page is drawn and read there; with
one (or surya, which has its own worker) the page is drawn in a bounded worker and read here.
A page built to hang the renderer fails with the limit it hit.

Coordinates: OCR reads the page as displayed (after /Rotate); its pixel boxes are divided by
the render scale and turned back into the page's unrotated frame, the frame PyMuPDF gives
text-layer words in, so OCR words and text-layer words share coordinates in the store.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from tools.corpus.ingest import OcrOutcome
from tools.corpus.pool import run_isolated
from tools.corpus.render import open_page
from tools.corpus.store import CorpusStore
from tools.corpus.worker import DEFAULT_MEMORY_MB, BoundedWorker, WorkLimits, memory_exhausted
from tools.errors import DossierError
from tools.ocr.base import OcrBackend, OcrResult
from tools.ocr.registry import get_backend, resolve_backend

__all__ = ["OcrSettings", "PageOcr", "OcrStep", "ocr_pdf_page", "render_for_ocr"]

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class OcrSettings:
    """How ingest OCRs pages."""

    backend: str = "auto"  # 'auto', 'rapidocr', 'tesseract' or 'surya'
    dpi: int = 150  # render resolution for OCR, dots per inch
    min_pixels: int = 2_000_000  # small pages are rendered at a higher DPI until they have this many pixels
    max_pixels: int = 8_000_000  # ... and large ones at a lower DPI so they fit this many
    workers: int = 0  # OCR processes; 0 = one per CPU core (surya always uses one)
    language: str = "eng"  # tesseract language code(s)
    timeout_s: float = 120.0  # seconds one page may take to draw and read (surya: also DOSSIER_SURYA_PAGE_TIMEOUT_S)
    memory_mb: int = DEFAULT_MEMORY_MB  # address-space cap of each OCR worker process, MiB; 0 = no cap

    def __post_init__(self):
        if not 50 <= self.dpi <= 1200:
            raise DossierError(f"OCR dpi {self.dpi} is out of range (use 50..1200, e.g. 200)")
        if not 64 * 64 <= self.min_pixels <= self.max_pixels:
            raise DossierError(f"need 4096 <= min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")
        if self.workers < 0:
            raise DossierError(f"OCR workers must be >= 0 (0 = one per core), got {self.workers}")
        if self.timeout_s <= 0:
            raise DossierError(f"OCR timeout_s must be positive, got {self.timeout_s}")
        WorkLimits(self.timeout_s, self.memory_mb)  # checks the memory limit


@dataclass(slots=True)
class PageOcr:
    """One page's OCR words in PDF points (unrotated page frame, origin top-left)."""

    backend: str
    text: str
    words: list[str]
    boxes: np.ndarray  # float32 (n, 4) points
    lines: np.ndarray  # int32 (n, 3) block, line, word
    confidences: np.ndarray  # float32 (n,) in [0, 1]
    pixels: tuple[int, int]  # size of the image that was read


def ocr_zoom(width_pt: float, height_pt: float, settings: OcrSettings) -> float:
    """Pixels per point for OCR: the DPI's, raised for small pages and lowered for huge ones."""
    zoom = settings.dpi / 72.0
    area = max(width_pt * height_pt, 1.0)
    if area * zoom * zoom < settings.min_pixels:
        zoom = math.sqrt(settings.min_pixels / area)
    if area * zoom * zoom > settings.max_pixels:
        zoom = math.sqrt(settings.max_pixels / area) * 0.999
    return zoom


def render_for_ocr(pdf_path: str | Path, page: int, settings: OcrSettings,
                   clip: tuple[float, float, float, float] | None = None) -> tuple[Image.Image, float, float, tuple]:
    """Render a page (or a clip of it, in displayed-page points) for OCR.

    Returns:
        (image, pixels per point horizontally, vertically, derotation matrix as 6 floats).

    Raises:
        DossierError: the page does not exist or cannot be rendered.
    """
    import pymupdf

    with open_page(pdf_path, page) as pdf_page:
        area = pymupdf.Rect(clip) if clip else pdf_page.rect
        zoom = ocr_zoom(area.width, area.height, settings)
        try:
            pix = pdf_page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), clip=area, alpha=False, colorspace=pymupdf.csRGB)
        except Exception as err:
            if memory_exhausted(err):
                raise MemoryError(str(err)) from None  # a bounded worker reports its memory limit
            raise DossierError(f"cannot render page {page} of {Path(pdf_path).name}: {err}") from None
        image = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
        image.info["dpi"] = (zoom * 72.0, zoom * 72.0)
        derotation = tuple(pdf_page.derotation_matrix)
    return image, pix.width / max(area.width, 1e-6), pix.height / max(area.height, 1e-6), derotation


def to_page_frame(boxes: np.ndarray, derotation: tuple) -> np.ndarray:
    """Map boxes from the displayed page to PyMuPDF's unrotated page frame (identity when unrotated)."""
    a, b, c, d, e, f = derotation
    if (a, b, c, d, e, f) == (1.0, 0.0, 0.0, 1.0, 0.0, 0.0) or len(boxes) == 0:
        return boxes
    corners = [(boxes[:, 0], boxes[:, 1]), (boxes[:, 2], boxes[:, 3])]
    xs = [x * a + y * c + e for x, y in corners]
    ys = [x * b + y * d + f for x, y in corners]
    return np.stack([np.minimum(*xs), np.minimum(*ys), np.maximum(*xs), np.maximum(*ys)], axis=1).astype(np.float32)


def ocr_pdf_page(backend: OcrBackend, pdf_path: str | Path, page: int, settings: OcrSettings,
                 render: Callable = render_for_ocr) -> PageOcr:
    """Render and OCR one page; boxes come back in PDF points of the unrotated page frame.

    Args:
        render: draws the page, as `render_for_ocr(pdf_path, page, settings)` (OcrStep passes one
            that draws in a bounded worker process).
    """
    image, scale_x, scale_y, derotation = render(pdf_path, page, settings)
    result: OcrResult = backend.read(image)
    boxes = to_page_frame(result.boxes_in_points(scale_x, scale_y), derotation)
    return PageOcr(backend.name, result.text, list(result.words), boxes, result.lines, result.confidences,
                   (result.width, result.height))


# -- ingest's OCR step ------------------------------------------------------------------------------
@dataclass(slots=True)
class _Job:
    document: str
    page: int
    pdf_path: str
    source_path: str


_WORKER_BACKEND: list[OcrBackend] = []  # one backend per worker process, made by _init_worker


def _init_worker(name: str, language: str, timeout_s: float) -> None:
    os.environ["OMP_THREAD_LIMIT"] = "1"
    _WORKER_BACKEND.append(get_backend(name, threads=1, language=language, timeout_s=timeout_s))


def _work(job: _Job, settings: dict) -> PageOcr | str:
    try:
        return ocr_pdf_page(_WORKER_BACKEND[0], job.pdf_path, job.page, OcrSettings(**settings))
    except DossierError as err:
        return str(err)
    except Exception as err:  # a backend bug must cost one page, not the batch
        if memory_exhausted(err):
            return _over_limit("memory", None, OcrSettings(**settings))
        return f"{type(err).__name__}: {str(err)[:200]}"


@dataclass(slots=True)
class OcrStep:
    """Ingest's OCR hook: `IngestConfig(ocr=OcrStep(OcrSettings(backend="auto")))`.

    Args:
        settings: backend, resolution, workers.
        progress: called as progress(done_pages, total_pages, backend) after each page.
    """

    settings: OcrSettings = field(default_factory=OcrSettings)
    progress: Callable[[int, int, str], None] | None = None

    def __call__(self, store: CorpusStore, pages: list[tuple[str, int]]) -> OcrOutcome:
        start = time.perf_counter()
        name = resolve_backend(self.settings.backend)
        if name is None:
            return OcrOutcome(None, 0, [], 0.0, skipped=len(pages))
        jobs = []
        for doc_id, page in pages:
            info = store.document(doc_id)
            jobs.append(_Job(doc_id, page, str(store.pdf_dir / f"{doc_id}.pdf"), info.source_path))
        outcome = OcrOutcome(name, 0, [], 0.0)
        done = 0

        def finished(job: _Job, result: PageOcr | str) -> None:
            nonlocal done
            _store_result(store, job, result, name, outcome)
            done += 1
            if self.progress:
                self.progress(done, len(jobs), name)

        workers = 1 if name == "surya" else min(self.settings.workers or os.cpu_count() or 1, len(jobs))
        if self.progress:
            self.progress(0, len(jobs), name)
        if workers <= 1:
            drawer = _BoundedRender(BoundedWorker(self.settings.memory_mb))
            drawer.worker.prepare(_render_job)  # starts while the backend loads here
            try:
                backend = get_backend(name, language=self.settings.language, timeout_s=self.settings.timeout_s)
            except BaseException:
                drawer.worker.close()
                raise
            try:
                for job in jobs:
                    finished(job, _inline(backend, job, self.settings, drawer))
            finally:
                backend.close()
                drawer.worker.close()
        else:
            _run_pool(jobs, name, self.settings, workers, finished)
        outcome.seconds = time.perf_counter() - start
        return outcome


@dataclass(slots=True)
class _BoundedRender:
    """`render_for_ocr`, drawn in a bounded worker process (kept for the next page)."""

    worker: BoundedWorker

    def __call__(self, pdf_path: str | Path, page: int, settings: OcrSettings) -> tuple:
        status, value = self.worker.call(_render_job, (str(pdf_path), page, asdict(settings)), settings.timeout_s)
        if status == "ok" and isinstance(value, str):
            raise DossierError(value)
        if status != "ok":
            raise DossierError(_over_limit(status, value, settings))
        return value


def _render_job(pdf_path: str, page: int, settings: dict) -> tuple | str:
    """Worker: `render_for_ocr`'s result, or why the page cannot be rendered."""
    try:
        return render_for_ocr(pdf_path, page, OcrSettings(**settings))
    except DossierError as err:
        return str(err)


def _over_limit(status: str, detail: object, settings: OcrSettings) -> str:
    """Why a page failed when its worker hit a limit or died (see tools/corpus/pool.py)."""
    if status == "timeout":
        return (f"drawing and reading it took longer than {settings.timeout_s:g} s (--ocr-timeout); the page may be "
                "built to hang PDF readers")
    if status == "memory":
        return f"it needed more than {settings.memory_mb} MB of memory (--memory-limit-mb)"
    if status == "crash":
        return f"the page crashed the OCR engine ({detail})"
    return str(detail)


def _inline(backend: OcrBackend, job: _Job, settings: OcrSettings, render: Callable) -> PageOcr | str:
    try:
        return ocr_pdf_page(backend, job.pdf_path, job.page, settings, render=render)
    except DossierError as err:
        return str(err)
    except Exception as err:  # a backend bug must cost one page, not the batch
        return f"{type(err).__name__}: {str(err)[:200]}"


def _store_result(store: CorpusStore, job: _Job, result: PageOcr | str, name: str, outcome: OcrOutcome) -> None:
    key = f"{job.source_path}#page={job.page}"
    if isinstance(result, str):
        reason = f"OCR ({name}) failed on page {job.page}: {result}"
        outcome.errors.append({"document": job.document, "page": job.page, "reason": reason})
        store.record_error(key, reason, job.document)
        log.info("%s page %d: %s", job.document, job.page, reason)
        return
    store.replace_page_text(job.document, job.page, result.text, result.words, result.boxes,
                            source=f"ocr:{result.backend}", lines=result.lines, confidences=result.confidences)
    with store.transaction() as db:  # a page that failed before and now worked is no longer an error
        db.execute("DELETE FROM errors WHERE source_path = ?", (key,))
    outcome.pages += 1


def _run_pool(jobs: list[_Job], name: str, settings: OcrSettings, workers: int, finished) -> None:
    """OCR in bounded worker processes; a page that hangs, bloats or crashes its worker fails alone."""
    run_isolated(jobs, _work, (asdict(settings),), workers, finished,
                 lambda job, status, detail: _over_limit(status, detail, settings),
                 WorkLimits(settings.timeout_s, settings.memory_mb),
                 initializer=_init_worker, initargs=(name, settings.language, settings.timeout_s))
