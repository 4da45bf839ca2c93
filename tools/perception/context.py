"""What every perception tool needs: the corpus store, settings, an OCR backend on demand, the reader.

`PerceptionContext.region_words` is the one place that decides where a region's words come
from: the stored words when the page has a usable text layer or was OCR'd at ingest, and
OCR of the region itself when the page is still unread, when a text-layer region holds no
words but does hold ink (text inside a figure or a scanned insert), or when the caller asks
for OCR. OCR results are cached per region, so repeated calls in an episode are free.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from PIL import Image

from tools.corpus.store import CorpusStore
from tools.errors import DossierError
from tools.ocr.base import OcrBackend
from tools.perception.page import PageView, Word

__all__ = ["PerceptionSettings", "PerceptionContext", "Reader", "SOURCES"]

# Targeted lookup's model: (question, image of the region, text of the region) -> short answer.
Reader = Callable[[str, Image.Image, str], str]
SOURCES = ("auto", "text_layer", "ocr")


@dataclass(slots=True, frozen=True)
class PerceptionSettings:
    """Resolutions and limits of the perception tools."""

    ocr_dpi: int = 300  # a region is rendered at this resolution for OCR (small crops read better sharp)
    view_size: int = 1024  # default longest side, in pixels, of a visual_detail crop
    max_view_size: int = 2048  # largest longest side a caller may ask for
    max_zoom: float = 12.0  # renders never exceed this many pixels per point (864 dpi); larger crops are upscaled
    padding: float = 0.02  # visual_detail pads the region by this fraction of the page on each side
    color_zoom: float = 4.0  # pixels per point when sampling colours (288 dpi)
    max_words: int = 400  # spatial_recovery lists at most this many words
    ocr_cache: int = 32  # regions whose OCR is kept

    def __post_init__(self):
        if not 72 <= self.ocr_dpi <= 1200:
            raise DossierError(f"ocr_dpi {self.ocr_dpi} is out of range (72..1200)")
        if not 64 <= self.view_size <= self.max_view_size <= 4096:
            raise DossierError(f"need 64 <= view_size <= max_view_size <= 4096, got {self.view_size}, {self.max_view_size}")
        if not 0 <= self.padding < 0.5:
            raise DossierError(f"padding {self.padding} must be in [0, 0.5)")
        if self.max_words < 1 or self.ocr_cache < 0 or self.max_zoom <= 0 or self.color_zoom <= 0:
            raise DossierError("max_words >= 1, ocr_cache >= 0, max_zoom > 0 and color_zoom > 0 are required")


@dataclass(slots=True)
class PerceptionContext:
    """Shared state of one toolkit (per runner, not global): store, OCR backend, caches, reader."""

    store: CorpusStore
    settings: PerceptionSettings = field(default_factory=PerceptionSettings)
    ocr: str | OcrBackend | None = "auto"  # backend name, a ready backend, or None to never OCR
    reader: Reader | None = None  # the model behind targeted_lookup (the engine supplies it)
    _backend: OcrBackend | None = None
    _ocr_cache: OrderedDict = field(default_factory=OrderedDict)
    # one OCR at a time: an agent's round runs its calls in threads, and the cache and the
    # OCR backends are not thread-safe
    _ocr_lock: threading.Lock = field(default_factory=threading.Lock)

    def view(self, document, page) -> PageView:
        if not isinstance(document, str) or not document:
            raise DossierError(f"document must be a document id (a PDF's file stem), got {document!r}")
        return PageView(self.store, document, page)

    def backend(self) -> OcrBackend:
        """The OCR backend, created on first use.

        Raises:
            DossierError: OCR is turned off, or no backend is usable (the message says how to install one).
        """
        if self._backend is None:
            if self.ocr is None:
                raise DossierError("this region needs OCR, but OCR is turned off for these tools (ocr=None)")
            if isinstance(self.ocr, OcrBackend):
                self._backend = self.ocr
            else:
                from tools.ocr import get_backend

                self._backend = get_backend(self.ocr)
        return self._backend

    def ocr_words(self, view: PageView, rect: tuple[float, float, float, float]) -> list[Word]:
        """OCR a clip of the page (padded a little so edge words are whole); words whose centre is inside."""
        with self._ocr_lock:
            return self._ocr_words(view, rect)

    def _ocr_words(self, view: PageView, rect: tuple[float, float, float, float]) -> list[Word]:
        key = (view.document, view.page, tuple(round(v, 2) for v in rect))
        if key in self._ocr_cache:
            self._ocr_cache.move_to_end(key)
            return self._ocr_cache[key]
        pad = 0.01 * max(view.width, view.height)
        clip = (max(rect[0] - pad, 0.0), max(rect[1] - pad, 0.0), min(rect[2] + pad, view.width),
                min(rect[3] + pad, view.height))
        image = view.render(clip, self.settings.ocr_dpi / 72.0)
        result = self.backend().read(image)
        boxes = result.boxes_in_points(image.width / (clip[2] - clip[0]), image.height / (clip[3] - clip[1]),
                                       offset=(clip[0], clip[1]))
        words = [Word(text, tuple(float(v) for v in box), (int(line[0]), int(line[1])), float(conf))
                 for text, box, line, conf in zip(result.words, boxes, result.lines, result.confidences)]
        inside = [w for w in words if _inside(w.center, rect)]
        if self.settings.ocr_cache:
            self._ocr_cache[key] = inside
            while len(self._ocr_cache) > self.settings.ocr_cache:
                self._ocr_cache.popitem(last=False)
        return inside

    def region_words(self, view: PageView, rect: tuple[float, float, float, float],
                     source: str = "auto") -> tuple[list[Word], str]:
        """A region's words in reading order and where they came from ('pdf', 'ocr:<backend>').

        Args:
            source: 'auto' (stored words, OCR where there are none), 'text_layer' (stored words only)
                or 'ocr' (always OCR the region now).
        """
        if source not in SOURCES:
            raise DossierError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
        if source == "ocr" or (source == "auto" and view.text_source == "none"):
            words = self.ocr_words(view, rect)
            return words, f"ocr:{self.backend().name}"
        stored = [w for w in view.words() if _inside(w.center, rect)]
        if view.text_source == "none":  # source == 'text_layer' on an unread page
            return [], "pdf"
        if stored or source == "text_layer" or self.ocr is None or not view.has_ink(rect):
            return stored, view.text_source
        return self.ocr_words(view, rect), f"ocr:{self.backend().name}"  # text in pixels only (a figure, an insert)


def _inside(point: tuple[float, float], rect: tuple[float, float, float, float]) -> bool:
    return rect[0] <= point[0] <= rect[2] and rect[1] <= point[1] <= rect[3]
