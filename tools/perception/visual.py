"""Visual detail: a crop of a region, padded and upscaled to a target size, as an image for the model.

No OCR: the model gets clearer pixels of exactly the place it asks about (colour, shape,
small print, chart marks). The crop is rendered from the PDF at the zoom that gives the
target size, so vector content stays sharp; past `max_zoom` (scans have no more detail to
give) the render is upscaled with Lanczos resampling instead.
"""

from __future__ import annotations

from PIL import Image

from tools.errors import DossierError
from tools.perception.context import PerceptionContext
from tools.perception.observation import Observation, parse_region

__all__ = ["visual_detail", "crop_region"]


def crop_region(ctx: PerceptionContext, document: str, page: int, region, size: int | None = None,
                padding: float | None = None) -> tuple[Image.Image, tuple[float, float, float, float], float]:
    """The padded crop of a region at `size` pixels on its longest side.

    Returns:
        (image, padded region as fractions, pixels per point of the final image).
    """
    settings = ctx.settings
    size = settings.view_size if size is None else size
    padding = settings.padding if padding is None else padding
    if not isinstance(size, int) or isinstance(size, bool) or not 64 <= size <= settings.max_view_size:
        raise DossierError(f"size must be an integer number of pixels in 64..{settings.max_view_size}, got {size!r}")
    if not isinstance(padding, (int, float)) or not 0 <= padding < 0.5:
        raise DossierError(f"padding must be a fraction of the page in [0, 0.5), got {padding!r}")
    left, top, right, bottom = parse_region(region)
    padded = (max(left - padding, 0.0), max(top - padding, 0.0), min(right + padding, 1.0), min(bottom + padding, 1.0))
    view = ctx.view(document, page)
    rect = view.rect(padded)
    longest = max(rect[2] - rect[0], rect[3] - rect[1])
    zoom = min(size / longest, settings.max_zoom)
    image = view.render(rect, zoom)
    if max(image.width, image.height) != size:  # exact size: upscale past max_zoom, or fix rounding
        scale = size / max(image.width, image.height)
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.LANCZOS)
    return image, padded, image.width / (rect[2] - rect[0])


def visual_detail(ctx: PerceptionContext, document: str, page: int, region=None, size: int | None = None,
                  padding: float | None = None) -> Observation:
    """A high-resolution crop of a region.

    Returns:
        content = {"image" (PIL RGB), "width", "height" (pixels), "padded_region" (the area the
        image shows, as fractions of the page), "pixels_per_point"}.
    """
    image, padded, pixels_per_point = crop_region(ctx, document, page, region, size, padding)
    content = {"image": image, "width": image.width, "height": image.height,
               "padded_region": [round(v, 4) for v in padded], "pixels_per_point": round(pixels_per_point, 3)}
    return Observation("visual_detail", document, page, list(parse_region(region)), content)
