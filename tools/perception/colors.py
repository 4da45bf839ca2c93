"""Dominant colours of a patch of pixels (a word, a table cell) and their everyday names.

The background of a patch is its most frequent colour (quantised to 16 levels a channel).
The text colour is read from the glyph cores: among pixels far from the background, the
half farthest from it (anti-aliased edges blend into the background and are left out), and
of those the most frequent colour (8 levels a channel), averaged in full precision. Names
come from HSV: low saturation gives black, gray or white; otherwise the hue bin, with
"light " for pale tints and "dark " for deep shades.
"""

from __future__ import annotations

import colorsys

import numpy as np

__all__ = ["patch_colors", "color_name", "hex_color"]

INK_DISTANCE = 60.0  # a pixel is ink when its RGB distance from the background exceeds this


def hex_color(rgb) -> str:
    r, g, b = (int(round(min(max(float(v), 0), 255))) for v in rgb)
    return f"#{r:02x}{g:02x}{b:02x}"


def _mode(pixels: np.ndarray, levels: int) -> np.ndarray:
    """Mean colour of the most frequent quantised colour of (n, 3) uint8 pixels."""
    step = 256 // levels
    codes = (pixels[:, 0] // step).astype(np.int32) * levels * levels + (pixels[:, 1] // step) * levels + pixels[:, 2] // step
    values, counts = np.unique(codes, return_counts=True)
    top = values[np.argmax(counts)]
    return pixels[codes == top].mean(axis=0)


def patch_colors(patch: np.ndarray) -> tuple[str | None, str | None]:
    """(text colour, background colour) of an (h, w, 3) uint8 patch as '#rrggbb'; text None when no ink."""
    pixels = np.asarray(patch, np.uint8).reshape(-1, 3)
    if len(pixels) == 0:
        return None, None
    background = _mode(pixels, 16)
    distance = np.linalg.norm(pixels.astype(np.float32) - background, axis=1)
    ink = distance > INK_DISTANCE
    if ink.sum() < 3:
        return None, hex_color(background)
    cores = pixels[ink][distance[ink] >= np.quantile(distance[ink], 0.5)]
    return hex_color(_mode(cores, 8)), hex_color(background)


def color_name(color: str | None) -> str | None:
    """An everyday name for '#rrggbb': 'red', 'light blue', 'black', ..."""
    if color is None:
        return None
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    hue, saturation, value = colorsys.rgb_to_hsv(r, g, b)
    if value < 0.2:
        return "black"
    if saturation < 0.08:
        return "white" if value > 0.9 else ("light gray" if value > 0.7 else ("gray" if value > 0.35 else "dark gray"))
    degrees = hue * 360
    names = ((15, "red"), (40, "orange"), (70, "yellow"), (165, "green"), (200, "cyan"), (255, "blue"),
             (320, "purple"), (345, "pink"), (361, "red"))
    name = next(n for limit, n in names if degrees < limit)
    if name == "orange" and value < 0.65:
        name = "brown"
    if value > 0.85 and saturation < 0.45:
        return f"light {name}"
    if value < 0.5:
        return f"dark {name}"
    return name
