"""Render page images on demand, at a chosen DPI under a pixel cap, cached as PNG in the corpus.

The pixel cap bounds memory whatever the page size: a 35000×35000-point page at 150 DPI
would be 5.3 gigapixels; it is rendered at the largest scale that fits `max_pixels`.

Drawing runs in a bounded worker process (tools/corpus/worker.py), never in the caller: a page
built to hang MuPDF (drawings nested to repeat 2^40 times) fails at `timeout_s` with a
`RenderLimitError` instead of hanging a studio request or an agent. `PageRenderer` keeps the
workers warm between pages and remembers pages that exceeded a limit, so asking again for one
answers at once.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from tools.atomic import atomic_path
from tools.corpus.worker import DEFAULT_MEMORY_MB, WorkerPool, WorkLimits, memory_exhausted
from tools.errors import DossierError

__all__ = ["RenderSettings", "RenderLimitError", "PageRenderer", "render_scale", "render_page", "open_page",
           "cache_file"]

DEFAULT_DPI = 150
DEFAULT_MAX_PIXELS = 4_000_000  # ~ A4 at 200 DPI; bounds memory for huge pages
REMEMBERED_FAILURES = 1024  # pages that exceeded a limit, remembered per renderer (oldest forgotten first)
# Drawing an ordinary page peaks at ~300 MB of address space, a 4-megapixel cap at ~600 MB; a
# hostile page grows ~120 MB/s, and a server may draw several at once: half the reader's cap.
RENDER_MEMORY_MB = DEFAULT_MEMORY_MB // 2


@dataclass(slots=True, frozen=True)
class RenderSettings:
    dpi: int = DEFAULT_DPI  # dots per inch (72 = one pixel per PDF point)
    max_pixels: int = DEFAULT_MAX_PIXELS  # upper bound on width × height of the image, in pixels
    timeout_s: float = 30.0  # wall-clock seconds one page may take to draw (an ordinary page: well under 1 s)
    memory_mb: int = RENDER_MEMORY_MB  # address-space cap of the process that draws, MiB; 0 = no cap

    def __post_init__(self):
        if not 1 <= self.dpi <= 2400:
            raise DossierError(f"dpi {self.dpi} is out of range (use 1..2400, e.g. 150)")
        if self.max_pixels < 64 * 64:
            raise DossierError(f"max_pixels {self.max_pixels} is too small (use at least 4096)")
        WorkLimits(self.timeout_s, self.memory_mb)  # checks both


class RenderLimitError(DossierError):
    """A page that could not be drawn within the time or memory limit, or that crashed the renderer."""


def render_scale(width_pt: float, height_pt: float, settings: RenderSettings) -> float:
    """Zoom factor (pixels per point) for a page: the DPI's, reduced to fit the pixel cap."""
    scale = settings.dpi / 72.0
    pixels = width_pt * scale * height_pt * scale
    if pixels > settings.max_pixels:
        scale *= math.sqrt(settings.max_pixels / pixels) * 0.999
        # the pixmap rounds each side up: shrink until the rounded size fits the cap too
        while math.ceil(width_pt * scale) * math.ceil(height_pt * scale) > settings.max_pixels:
            scale *= 0.995
    return scale


@contextmanager
def open_page(pdf_path: str | Path, page: int, password: str | None = None):
    """Open a PDF and yield its page (1-indexed), closing the document afterwards.

    Raises:
        DossierError: the PDF cannot be opened or the page does not exist.
    """
    from tools.corpus.pdf import PdfError, open_pdf

    try:
        doc = open_pdf(pdf_path, password)
    except PdfError as err:
        raise DossierError(f"cannot render {pdf_path}: {err}") from None
    try:
        if not 1 <= page <= doc.page_count:
            raise DossierError(f"page {page} does not exist in {Path(pdf_path).name} (it has {doc.page_count} pages)")
        yield doc.load_page(page - 1)
    finally:
        doc.close()


def cache_file(cache_dir: Path, page: int, settings: RenderSettings) -> Path:
    """Where `render_page` caches a page (1-indexed) rendered with `settings` (a PNG file)."""
    return Path(cache_dir) / f"p{page:05d}-{settings.dpi}dpi-{settings.max_pixels}px.png"


def render_page(pdf_path: str | Path, page: int, settings: RenderSettings, cache_dir: Path | None = None,
                password: str | None = None, renderer: PageRenderer | None = None) -> Image.Image:
    """Render one page (1-indexed) to an RGB image, reading and filling the PNG cache when given.

    Args:
        renderer: keeps worker processes warm between calls; without one, a worker is started for this page.

    Raises:
        DossierError: the page does not exist or cannot be rendered.
        RenderLimitError: drawing it took longer than `settings.timeout_s`, needed more than
            `settings.memory_mb`, or crashed the renderer.
    """
    cached = None
    if cache_dir is not None:
        cached = cache_file(cache_dir, page, settings)
        if cached.is_file():
            with Image.open(cached) as img:
                return img.convert("RGB")
    if renderer is not None:
        return renderer.render(pdf_path, page, settings, cached, password)
    renderer = PageRenderer(keep=0)
    try:
        return renderer.render(pdf_path, page, settings, cached, password)
    finally:
        renderer.close()


class PageRenderer:
    """Draws pages in bounded worker processes, kept warm; thread-safe (the studio renders from many threads).

    Args:
        keep: idle workers kept per memory limit for the next pages.
    """

    def __init__(self, keep: int = 2):
        self.keep = keep
        self._pools: dict[int, WorkerPool] = {}
        self._failed: OrderedDict[tuple, str] = OrderedDict()  # (pdf, page, settings) -> why it exceeded a limit
        self._lock = threading.Lock()

    def render(self, pdf_path: str | Path, page: int, settings: RenderSettings, cache_path: Path | None = None,
               password: str | None = None) -> Image.Image:
        """Draw a page (1-indexed) in a worker, writing `cache_path` (a PNG) there when given.

        Raises:
            DossierError: the page does not exist or cannot be rendered.
            RenderLimitError: over the time or memory limit, or the renderer crashed (remembered: a
                second call for the same page and settings raises it at once).
        """
        key = (str(pdf_path), page, settings)
        with self._lock:
            known = self._failed.get(key)
            pool = self._pools.setdefault(settings.memory_mb, WorkerPool(settings.memory_mb, self.keep))
        if known is not None:
            raise RenderLimitError(known)
        status, value = pool.call(_draw, (str(pdf_path), page, settings, password,
                                          None if cache_path is None else str(cache_path)), settings.timeout_s)
        if status == "ok":
            if isinstance(value, str):
                raise DossierError(value)
            size, samples = value
            return Image.frombytes("RGB", size, samples)
        name = Path(pdf_path).name
        if status == "timeout":
            reason = (f"page {page} of {name} took longer than {settings.timeout_s:g} s to draw (the render time "
                      "limit); it is too complex to show, or built to hang PDF readers")
        elif status == "memory":
            reason = (f"page {page} of {name} needs more than {settings.memory_mb} MB of memory to draw (the render "
                      "memory limit); it is too complex to show, or built to overload PDF readers")
        elif status == "crash":
            reason = f"page {page} of {name} crashed the PDF renderer ({value}); the file is damaged"
        else:
            raise DossierError(f"cannot render page {page} of {name}: {value}")
        with self._lock:
            self._failed[key] = reason
            while len(self._failed) > REMEMBERED_FAILURES:
                self._failed.popitem(last=False)
        raise RenderLimitError(reason)

    def close(self) -> None:
        """Let the idle workers exit."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


def _draw(pdf_path: str, page: int, settings: RenderSettings, password: str | None,
          cache_path: str | None) -> tuple[tuple[int, int], bytes] | str:
    """Worker: the page's RGB pixels (and its PNG written to `cache_path`), or why it cannot be rendered."""
    import pymupdf

    try:
        with open_page(pdf_path, page, password) as pdf_page:
            scale = render_scale(pdf_page.rect.width, pdf_page.rect.height, settings)
            try:
                pix = pdf_page.get_pixmap(matrix=pymupdf.Matrix(scale, scale), alpha=False, colorspace=pymupdf.csRGB)
            except Exception as err:
                if memory_exhausted(err):
                    raise MemoryError(str(err)) from None  # the parent reports the memory limit
                return f"cannot render page {page} of {Path(pdf_path).name}: {err}"
            size, samples = (pix.width, pix.height), pix.samples
    except DossierError as err:
        return str(err)
    if cache_path is not None:
        cached = Path(cache_path)
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cached) as tmp:
            Image.frombytes("RGB", size, samples).save(tmp, format="PNG")
    return size, samples
