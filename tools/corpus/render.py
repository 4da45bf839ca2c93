"""Render page images on demand, at a chosen DPI under a pixel cap, cached as PNG in the corpus.

The pixel cap bounds memory whatever the page size: a 35000×35000-point page at 150 DPI
would be 5.3 gigapixels; it is rendered at the largest scale that fits `max_pixels`.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from tools.errors import DossierError

__all__ = ["RenderSettings", "render_scale", "render_page", "open_page", "cache_file"]

DEFAULT_DPI = 150
DEFAULT_MAX_PIXELS = 4_000_000  # ~ A4 at 200 DPI; bounds memory for huge pages


@dataclass(slots=True, frozen=True)
class RenderSettings:
    dpi: int = DEFAULT_DPI  # dots per inch (72 = one pixel per PDF point)
    max_pixels: int = DEFAULT_MAX_PIXELS  # upper bound on width × height of the image, in pixels

    def __post_init__(self):
        if not 1 <= self.dpi <= 2400:
            raise DossierError(f"dpi {self.dpi} is out of range (use 1..2400, e.g. 150)")
        if self.max_pixels < 64 * 64:
            raise DossierError(f"max_pixels {self.max_pixels} is too small (use at least 4096)")


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
                password: str | None = None) -> Image.Image:
    """Render one page (1-indexed) to an RGB image, reading and filling the PNG cache when given.

    Raises:
        DossierError: the page does not exist or cannot be rendered.
    """
    cached = None
    if cache_dir is not None:
        cached = cache_file(cache_dir, page, settings)
        if cached.is_file():
            with Image.open(cached) as img:
                return img.convert("RGB")
    import pymupdf

    with open_page(pdf_path, page, password) as pdf_page:
        scale = render_scale(pdf_page.rect.width, pdf_page.rect.height, settings)
        try:
            pix = pdf_page.get_pixmap(matrix=pymupdf.Matrix(scale, scale), alpha=False, colorspace=pymupdf.csRGB)
        except Exception as err:
            raise DossierError(f"cannot render page {page} of {Path(pdf_path).name}: {err}") from None
        image = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        image.save(tmp, format="PNG")
        os.replace(tmp, cached)
    return image
