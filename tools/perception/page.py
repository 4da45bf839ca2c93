"""One page as the perception tools see it: its words in displayed coordinates, and pixels on demand.

Coordinates here are PDF points of the displayed page (after /Rotate), origin top-left, the
frame a region's fractions refer to and the frame a rendered image shows. The store keeps
words in PyMuPDF's unrotated frame; `PageView.words` maps them. Renders of a region (a
"clip") are made directly at the zoom asked for, so zooming into a corner of a page costs
the pixels of the corner, not of the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from tools.corpus.store import CorpusStore
from tools.errors import DossierError

__all__ = ["PageView", "Word", "words_text"]

MAX_CLIP_PIXELS = 16_000_000  # bound on one render's width × height


@dataclass(slots=True, frozen=True)
class Word:
    text: str
    box: tuple[float, float, float, float]  # displayed-page points: x0, y0, x1, y1
    line: tuple[int, int]  # (block, line): words sharing it are on one line of reading order
    confidence: float | None  # OCR confidence in [0, 1]; None for text-layer words

    @property
    def center(self) -> tuple[float, float]:
        return (self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2


def words_text(words: list[Word]) -> str:
    """Words in their order, a space within a line and a newline between lines."""
    parts: list[str] = []
    previous = None
    for word in words:
        if previous is not None:
            parts.append(" " if word.line == previous else "\n")
        parts.append(word.text)
        previous = word.line
    return "".join(parts)


class PageView:
    """A page of a corpus store.

    Raises:
        DossierError: unknown document or page (the store's messages name the bad value).
    """

    def __init__(self, store: CorpusStore, document: str, page: int):
        if not isinstance(page, int) or isinstance(page, bool):
            raise DossierError(f"page must be an integer (1-indexed), got {page!r}")
        self.store = store
        self.document = document
        self.page = page
        self.info = store.page(document, page)  # validates document and page
        if self.info.width <= 0 or self.info.height <= 0:
            raise DossierError(f"page {page} of {document!r} could not be read at ingest ({self.info.ocr_reason})")
        self.pdf_path: Path = store.pdf_dir / f"{document}.pdf"
        self._rotation: tuple | None = None
        self._words: list[Word] | None = None

    @property
    def width(self) -> float:
        return self.info.width

    @property
    def height(self) -> float:
        return self.info.height

    @property
    def text_source(self) -> str:
        """'pdf' (a usable text layer), 'ocr:<backend>' (read at ingest) or 'none' (flagged, unread)."""
        return "none" if self.info.needs_ocr else self.info.text_source

    def rect(self, region: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        """A normalised region as displayed-page points."""
        left, top, right, bottom = region
        return left * self.width, top * self.height, right * self.width, bottom * self.height

    def normalized(self, box) -> list[float]:
        from tools.perception.observation import to_normalized

        return to_normalized(box, self.width, self.height)

    # -- words -----------------------------------------------------------------------------
    def words(self) -> list[Word]:
        """The stored words (text layer, or OCR read at ingest) in reading order, displayed frame."""
        if self._words is None:
            stored = self.store.page_words(self.document, self.page)
            boxes = _apply(stored.boxes, self._rotation_matrix()) if len(stored.words) else stored.boxes
            conf = stored.confidences
            self._words = [Word(text, tuple(float(v) for v in box), (int(line[0]), int(line[1])),
                                None if conf is None else float(conf[i]))
                           for i, (text, box, line) in enumerate(zip(stored.words, boxes, stored.lines))]
        return self._words

    def _rotation_matrix(self) -> tuple:
        if self._rotation is None:
            import pymupdf

            with pymupdf.open(self.pdf_path) as doc:
                self._rotation = tuple(doc.load_page(self.page - 1).rotation_matrix)
        return self._rotation

    # -- pixels ----------------------------------------------------------------------------
    def render(self, rect: tuple[float, float, float, float], zoom: float) -> Image.Image:
        """Render a clip (displayed-page points) at `zoom` pixels per point, capped at MAX_CLIP_PIXELS."""
        import pymupdf

        x0, y0, x1, y1 = rect
        area = max((x1 - x0) * (y1 - y0), 1e-6)
        zoom = min(zoom, (MAX_CLIP_PIXELS / area) ** 0.5)
        try:
            with pymupdf.open(self.pdf_path) as doc:
                pix = doc.load_page(self.page - 1).get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), clip=pymupdf.Rect(rect),
                                                              alpha=False, colorspace=pymupdf.csRGB)
        except Exception as err:
            raise DossierError(f"cannot render page {self.page} of {self.document!r}: {err}") from None
        image = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
        image.info["dpi"] = (zoom * 72.0, zoom * 72.0)
        return image

    def has_ink(self, rect: tuple[float, float, float, float]) -> bool:
        """True when the clip is not blank paper (some pixels clearly darker than the background)."""
        image = np.asarray(self.render(rect, 1.0).convert("L"), np.int16)
        if image.size == 0:
            return False
        background = int(np.median(image))
        return float(np.mean(np.abs(image - background) > 60)) > 0.002


def _apply(boxes: np.ndarray, matrix: tuple) -> np.ndarray:
    """Transform (n, 4) boxes by an affine matrix (a, b, c, d, e, f), keeping them axis-aligned."""
    a, b, c, d, e, f = matrix
    if (a, b, c, d, e, f) == (1.0, 0.0, 0.0, 1.0, 0.0, 0.0):
        return boxes
    xs = [boxes[:, 0] * a + boxes[:, 1] * c + e, boxes[:, 2] * a + boxes[:, 3] * c + e]
    ys = [boxes[:, 0] * b + boxes[:, 1] * d + f, boxes[:, 2] * b + boxes[:, 3] * d + f]
    return np.stack([np.minimum(*xs), np.minimum(*ys), np.maximum(*xs), np.maximum(*ys)], axis=1)
