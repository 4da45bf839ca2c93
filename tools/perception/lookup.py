"""Targeted lookup: ask the model a question about one region, given its crop and its text.

The engine supplies the model as a `Reader`: a callable (question, image, context_text) ->
short answer. The tool builds the evidence — the padded, upscaled crop (as visual_detail)
and the region's text in reading order (as text_recovery) — calls the reader once, and
returns the answer grounded in the region. A reader that fails yields an error observation.
"""

from __future__ import annotations

from tools.errors import DossierError
from tools.perception.context import PerceptionContext
from tools.perception.observation import Observation, parse_region
from tools.perception.page import words_text
from tools.perception.visual import crop_region

__all__ = ["targeted_lookup"]

MAX_ANSWER_CHARS = 2000  # a reader's answer is cut here so one call cannot flood the context


def targeted_lookup(ctx: PerceptionContext, document: str, page: int, question: str, region=None) -> Observation:
    """Answer `question` from one region.

    Returns:
        content = {"question", "answer", "text_source"}.

    Raises:
        DossierError: no reader configured, empty question, or the reader failed.
    """
    if ctx.reader is None:
        raise DossierError("targeted_lookup needs a model: create the toolkit with reader=... (the engine supplies one)")
    if not isinstance(question, str) or not question.strip():
        raise DossierError(f"question must be a non-empty string, got {question!r}")
    box = parse_region(region)
    image, _, _ = crop_region(ctx, document, page, box)
    view = ctx.view(document, page)
    words, origin = ctx.region_words(view, view.rect(box))
    try:
        answer = ctx.reader(question.strip(), image, words_text(words))
    except Exception as err:  # the model is the engine's; its failure costs this call only
        raise DossierError(f"the reader failed on this question: {type(err).__name__}: {str(err)[:200]}") from None
    if not isinstance(answer, str):
        raise DossierError(f"the reader must return a string, returned {type(answer).__name__}")
    return Observation("targeted_lookup", document, page, list(box),
                       {"question": question.strip(), "answer": answer.strip()[:MAX_ANSWER_CHARS], "text_source": origin})
