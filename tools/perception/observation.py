"""Grounded observations: what a perception tool returns, and the region it read from.

Every tool call yields `Observation(tool, document, page, region, content)`: the region is
the normalised rectangle (l, t, r, b) ∈ [0, 1]⁴ of the displayed page that was read, so
every piece of evidence is tied to where on the page it came from (Q-Guide, Section 3.1).
A call that cannot run (unknown document, page out of range, region off the page, bad
argument) yields an observation with `error` set and no content, never an exception.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass

from PIL import Image

from tools.errors import DossierError

__all__ = ["Observation", "FULL_PAGE", "parse_region", "to_normalized"]

FULL_PAGE = (0.0, 0.0, 1.0, 1.0)
_EPSILON = 1e-6  # rounding slack at the page edges


@dataclass(slots=True)
class Observation:
    """One tool result, tied to the page region it was read from."""

    tool: str  # the tool that produced it
    document: str | None  # document id (None when the call named none)
    page: int | None  # 1-indexed page
    region: list[float] | None  # normalised l, t, r, b of the displayed page; None when the call was invalid
    content: dict | None  # the tool's result; images are PIL images under the key "image"
    error: str | None = None  # set instead of content when the call could not run

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def images(self) -> list[Image.Image]:
        """Images in the content (the crop of visual_detail), for a vision model's input."""
        if not self.content:
            return []
        return [value for value in self.content.values() if isinstance(value, Image.Image)]

    def to_json(self, images: str = "placeholder") -> dict:
        """A JSON-ready dict.

        Args:
            images: "placeholder" replaces each image by `"<image W×H px>"` (trajectories keep
                page ids, not pixels); "base64" embeds it as a PNG data URL; "drop" omits it.
        """
        if images not in ("placeholder", "base64", "drop"):
            raise DossierError(f"images must be 'placeholder', 'base64' or 'drop', got {images!r}")
        out = {"tool": self.tool, "document": self.document, "page": self.page,
               "region": None if self.region is None else [round(v, 4) for v in self.region]}
        if self.error is not None:
            out["error"] = self.error
            return out
        content = {}
        for key, value in (self.content or {}).items():
            if isinstance(value, Image.Image):
                if images == "drop":
                    continue
                value = _png_data_url(value) if images == "base64" else f"<image {value.width}×{value.height} px>"
            content[key] = value
        out["content"] = content
        return out


def _png_data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def parse_region(value) -> tuple[float, float, float, float]:
    """Check a region given as [l, t, r, b] fractions of the page (None = the whole page).

    Raises:
        DossierError: not four numbers, a coordinate outside [0, 1], or an empty rectangle;
            the message echoes the value and says what a region is.
    """
    if value is None:
        return FULL_PAGE
    hint = "a region is [l, t, r, b]: fractions of the page width and height, 0 <= l < r <= 1 and 0 <= t < b <= 1"
    if isinstance(value, dict) and set(value) == {"l", "t", "r", "b"}:
        value = [value["l"], value["t"], value["r"], value["b"]]
    if (not isinstance(value, (list, tuple)) or len(value) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise DossierError(f"region {value!r} is not four numbers; {hint}")
    coords = [float(v) for v in value]
    if not all(math.isfinite(v) for v in coords):
        raise DossierError(f"region {value!r} has a non-finite coordinate; {hint}")
    if any(v < -_EPSILON or v > 1 + _EPSILON for v in coords):
        raise DossierError(f"region {_show(coords)} is outside the page; {hint}")
    left, top, right, bottom = (min(max(v, 0.0), 1.0) for v in coords)
    if right - left <= _EPSILON or bottom - top <= _EPSILON:
        raise DossierError(f"region {_show(coords)} is empty (need l < r and t < b); {hint}")
    return left, top, right, bottom


def to_normalized(box, width: float, height: float) -> list[float]:
    """A box in points as rounded [l, t, r, b] fractions of the page."""
    x0, y0, x1, y1 = (float(v) for v in box)
    return [round(min(max(x0 / width, 0), 1), 4), round(min(max(y0 / height, 0), 1), 4),
            round(min(max(x1 / width, 0), 1), 4), round(min(max(y1 / height, 0), 1), 4)]


def _show(coords: list[float]) -> str:
    return "[" + ", ".join(f"{v:g}" for v in coords) + "]"
