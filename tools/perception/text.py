"""Text recovery: the text of a page or region in reading order (text layer where good, OCR otherwise)."""

from __future__ import annotations

from tools.perception.context import PerceptionContext
from tools.perception.observation import Observation, parse_region
from tools.perception.page import words_text

__all__ = ["text_recovery"]


def text_recovery(ctx: PerceptionContext, document: str, page: int, region=None, source: str = "auto") -> Observation:
    """Read a region's text.

    Args:
        document: document id.
        page: 1-indexed page.
        region: [l, t, r, b] fractions of the page; None = the whole page.
        source: 'auto', 'text_layer' or 'ocr' (see PerceptionContext.region_words).

    Returns:
        content = {"text", "source" ('pdf' or 'ocr:<backend>'), "words" (count), "confidence"
        (mean OCR confidence, or null for the text layer)}.

    Raises:
        DossierError: unknown document or page, bad region or source.
    """
    box = parse_region(region)
    view = ctx.view(document, page)
    words, origin = ctx.region_words(view, view.rect(box), source)
    confidences = [w.confidence for w in words if w.confidence is not None]
    content = {"text": words_text(words), "source": origin, "words": len(words),
               "confidence": round(sum(confidences) / len(confidences), 3) if confidences else None}
    return Observation("text_recovery", document, page, list(box), content)
