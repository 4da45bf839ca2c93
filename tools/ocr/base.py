"""The OCR interface every backend implements, and the result it returns.

A backend reads one RGB image and returns words with axis-aligned boxes in the image's
pixels, a confidence per word in [0, 1] and the reading structure (block, line, word
numbers, in reading order). `OcrResult` converts boxes to normalised [0, 1] coordinates
or, given the render scale, to PDF points, so OCR words and text-layer words share the
corpus store's coordinates.

Backends are import-guarded: `unavailable_reason()` says, without importing anything heavy,
why a backend cannot run here (and how to install it), or returns None when it can.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from PIL import Image

from tools.errors import DossierError

__all__ = ["OcrBackend", "OcrError", "OcrResult", "empty_result"]


class OcrError(DossierError):
    """A backend failed on one image (crashed, timed out, unreadable output); the message says which."""


@dataclass(slots=True)
class OcrResult:
    """Words read from one image, in reading order.

    `boxes` are pixels of the image that was read, origin top-left: x0, y0, x1, y1.
    """

    backend: str  # which backend read it ('rapidocr', 'tesseract', 'surya')
    width: int  # image width in pixels
    height: int  # image height in pixels
    words: list[str]  # in reading order
    boxes: np.ndarray  # float32 (n, 4) pixels: x0, y0, x1, y1
    confidences: np.ndarray  # float32 (n,) in [0, 1]
    lines: np.ndarray  # int32 (n, 3): block, line, word number; sorted = reading order

    def __post_init__(self):
        n = len(self.words)
        assert self.boxes.shape == (n, 4), (self.boxes.shape, n)
        assert self.confidences.shape == (n,) and self.lines.shape == (n, 3)

    def __len__(self) -> int:
        return len(self.words)

    @property
    def normalized_boxes(self) -> np.ndarray:
        """Boxes as fractions of the image size (l, t, r, b in [0, 1]), float32 (n, 4)."""
        scale = np.array([self.width, self.height, self.width, self.height], np.float32)
        return np.clip(self.boxes / np.maximum(scale, 1), 0.0, 1.0)

    def boxes_in_points(self, scale_x: float, scale_y: float, offset: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
        """Boxes in PDF points, for an image rendered at `scale_*` pixels per point.

        Args:
            scale_x: horizontal pixels per point of the render that was read.
            scale_y: vertical pixels per point.
            offset: the point coordinates of the image's top-left corner (a clip's origin).
        """
        scale = np.array([scale_x, scale_y, scale_x, scale_y], np.float32)
        origin = np.array([offset[0], offset[1], offset[0], offset[1]], np.float32)
        return (self.boxes / scale + origin).astype(np.float32)

    @property
    def text(self) -> str:
        """Words joined by spaces, a newline between lines and a blank line between blocks."""
        out: list[str] = []
        previous = None
        for word, (block, line, _) in zip(self.words, self.lines.tolist()):
            if previous is not None:
                out.append(" " if (block, line) == previous else ("\n" if block == previous[0] else "\n\n"))
            out.append(word)
            previous = (block, line)
        return "".join(out)

    def mean_confidence(self) -> float:
        return float(self.confidences.mean()) if len(self.words) else 0.0


def empty_result(backend: str, width: int, height: int) -> OcrResult:
    """A result with no words (a blank image)."""
    return OcrResult(backend, width, height, [], np.zeros((0, 4), np.float32), np.zeros(0, np.float32),
                     np.zeros((0, 3), np.int32))


class OcrBackend(ABC):
    """One OCR engine. Create through `tools.ocr.get_backend(name)`; call `read(image)` per image."""

    name: ClassVar[str]  # 'rapidocr', 'tesseract', 'surya'
    install_hint: ClassVar[str]  # the command that installs it

    @classmethod
    @abstractmethod
    def unavailable_reason(cls) -> str | None:
        """Why this backend cannot run on this machine (with the install command), or None when it can.

        Must be cheap: it checks for files and modules, it does not load models.
        """

    @abstractmethod
    def read(self, image: Image.Image) -> OcrResult:
        """OCR one image (RGB; other modes are converted).

        Raises:
            OcrError: the engine failed on this image.
        """

    def close(self) -> None:  # noqa: B027 - optional hook; most backends hold nothing to release
        """Release processes or sessions the backend holds."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
