"""Spatial recovery: words with positions, their colours, and the text along a line between two points.

Three modes over a page or region:
- "words": every word with its box (normalised page coordinates), or with `query` only the
  places where that phrase occurs — grounding "where does it say X";
- "colors": each word's text colour and background colour (hex and name), and the region's
  dominant ones — "which value is printed in red", "which row is highlighted";
- "line": the words whose centres lie within `corridor` of the segment from (x0, y0) to
  (x1, y1), ordered along it — labels along a route, a diagonal stamp, an axis.
"""

from __future__ import annotations

import re

import numpy as np

from tools.errors import DossierError
from tools.perception.colors import color_name, patch_colors
from tools.perception.context import PerceptionContext
from tools.perception.observation import Observation, parse_region
from tools.perception.page import PageView, Word

__all__ = ["spatial_recovery", "MODES"]

MODES = ("words", "colors", "line")
_PUNCT = re.compile(r"^\W+|\W+$")


def _norm(text: str) -> str:
    return _PUNCT.sub("", text.lower())


def _union(words: list[Word]) -> tuple[float, float, float, float]:
    return (min(w.box[0] for w in words), min(w.box[1] for w in words),
            max(w.box[2] for w in words), max(w.box[3] for w in words))


def _matches(words: list[Word], query: str) -> list[list[Word]]:
    """Runs of consecutive words that spell the query (case and edge punctuation ignored)."""
    wanted = [_norm(t) for t in query.split() if _norm(t)]
    if not wanted:
        raise DossierError(f"query {query!r} has no letters or digits to look for")
    keys = [_norm(w.text) for w in words]
    found = []
    for i in range(len(words) - len(wanted) + 1):
        if len(wanted) == 1:
            hit = wanted[0] in keys[i]
        else:
            hit = all(keys[i + j] == wanted[j] for j in range(len(wanted)))
        if hit:
            found.append(words[i:i + len(wanted)])
    return found


def word_colors(ctx: PerceptionContext, view: PageView, rect, words: list[Word]) -> tuple[list[dict], dict]:
    """Per word {"text", "box", "color", "color_name", "background", "background_name"}; and the region's dominant."""
    zoom = ctx.settings.color_zoom
    image = np.asarray(view.render(rect, zoom))
    sx = image.shape[1] / max(rect[2] - rect[0], 1e-6)
    sy = image.shape[0] / max(rect[3] - rect[1], 1e-6)
    out = []
    for word in words:
        x0 = int(max((word.box[0] - rect[0]) * sx, 0))
        y0 = int(max((word.box[1] - rect[1]) * sy, 0))
        x1 = int(min((word.box[2] - rect[0]) * sx + 1, image.shape[1]))
        y1 = int(min((word.box[3] - rect[1]) * sy + 1, image.shape[0]))
        text, background = patch_colors(image[y0:y1, x0:x1])
        out.append({"text": word.text, "box": view.normalized(word.box), "color": text, "color_name": color_name(text),
                    "background": background, "background_name": color_name(background)})
    region_text, region_background = patch_colors(image)
    counts: dict[str, int] = {}
    for item in out:
        if item["color"]:
            counts[item["color_name"]] = counts.get(item["color_name"], 0) + 1
    dominant = {"background": region_background, "background_name": color_name(region_background),
                "text": region_text, "text_name": color_name(region_text),
                "text_colors": dict(sorted(counts.items(), key=lambda kv: -kv[1]))}
    return out, dominant


def _along(words: list[Word], start: tuple[float, float], end: tuple[float, float], corridor: float) -> list[tuple[float, Word]]:
    p = np.array(start, np.float64)
    direction = np.array(end, np.float64) - p
    length2 = float(direction @ direction)
    hits = []
    for word in words:
        c = np.array(word.center, np.float64)
        t = 0.0 if length2 == 0 else float(np.clip((c - p) @ direction / length2, 0.0, 1.0))
        distance = float(np.linalg.norm(c - (p + t * direction)))
        reach = corridor + min(word.box[2] - word.box[0], word.box[3] - word.box[1]) / 2
        if distance <= reach:
            hits.append((t, word))
    return sorted(hits, key=lambda item: item[0])


def spatial_recovery(ctx: PerceptionContext, document: str, page: int, region=None, mode: str = "words",
                     query: str | None = None, line=None, corridor: float = 0.02, source: str = "auto") -> Observation:
    """Ground words in the page: positions, colours, or text along a line.

    Args:
        region: [l, t, r, b] fractions of the page; None = the whole page.
        mode: 'words', 'colors' or 'line'.
        query: with mode 'words' (or 'colors'), keep only the places where this phrase occurs.
        line: with mode 'line', [x0, y0, x1, y1]: the segment's end points as fractions of the page.
        corridor: with mode 'line', the half-width of the band around the segment, as a fraction of
            the page width.
        source: where words come from: 'auto', 'text_layer' or 'ocr'.

    Returns:
        mode words:  {"words": [{"text", "box"}], "truncated"} or, with a query, {"query", "matches": [{"text", "box"}]}
        mode colors: {"words": [{"text", "box", "color", "color_name", "background", "background_name"}], "dominant"}
        mode line:   {"line", "corridor", "text", "words": [{"text", "box", "offset" (0..1 along the line)}]}
        Boxes are [l, t, r, b] fractions of the page.
    """
    if mode not in MODES:
        raise DossierError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    box = parse_region(region)
    view = ctx.view(document, page)
    rect = view.rect(box)
    limit = ctx.settings.max_words
    if mode == "line":
        if line is None:
            raise DossierError("mode 'line' needs line = [x0, y0, x1, y1]: the segment's end points as fractions of the page")
        segment = parse_segment(line)
        if not isinstance(corridor, (int, float)) or not 0 < corridor <= 0.5:
            raise DossierError(f"corridor must be a fraction of the page width in (0, 0.5], got {corridor!r}")
        start = (segment[0] * view.width, segment[1] * view.height)
        end = (segment[2] * view.width, segment[3] * view.height)
        reach = corridor * view.width
        band = (max(min(start[0], end[0]) - reach, rect[0]), max(min(start[1], end[1]) - reach, rect[1]),
                min(max(start[0], end[0]) + reach, rect[2]), min(max(start[1], end[1]) + reach, rect[3]))
        if band[2] <= band[0] or band[3] <= band[1]:
            raise DossierError(f"line {list(line)} does not pass through region {list(box)}")
        words, origin = ctx.region_words(view, band, source)
        hits = _along(words, start, end, reach)[:limit]
        content = {"line": [float(v) for v in segment], "corridor": corridor, "source": origin,
                   "text": " ".join(w.text for _, w in hits),
                   "words": [{"text": w.text, "box": view.normalized(w.box), "offset": round(t, 4)} for t, w in hits]}
        return Observation("spatial_recovery", document, page, list(box), content)

    words, origin = ctx.region_words(view, rect, source)
    if query is not None:
        runs = _matches(words, query)
        if mode == "words":
            matches = [{"text": " ".join(w.text for w in run), "box": view.normalized(_union(run))} for run in runs]
            return Observation("spatial_recovery", document, page, list(box),
                               {"query": query, "source": origin, "matches": matches[:limit]})
        words = [w for run in runs for w in run]
    truncated = len(words) > limit
    words = words[:limit]
    if mode == "words":
        content = {"source": origin, "words": [{"text": w.text, "box": view.normalized(w.box)} for w in words],
                   "truncated": truncated}
    else:
        listed, dominant = word_colors(ctx, view, rect, words)
        content = {"source": origin, "words": listed, "dominant": dominant, "truncated": truncated}
        if query is not None:
            content["query"] = query
    return Observation("spatial_recovery", document, page, list(box), content)


def parse_segment(value) -> tuple[float, float, float, float]:
    """Check a segment [x0, y0, x1, y1] given as fractions of the page (the ends may be in any order)."""
    if (not isinstance(value, (list, tuple)) or len(value) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise DossierError(f"line {value!r} is not four numbers [x0, y0, x1, y1] (fractions of the page)")
    if any(not 0 <= float(v) <= 1 for v in value):
        raise DossierError(f"line {list(value)} leaves the page: its end points must be fractions in [0, 1]")
    return tuple(float(v) for v in value)
