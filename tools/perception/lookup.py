"""Targeted lookup: ask the model a question about one region, given its crop and its text.

The engine supplies the model as a `Reader`: a callable (question, image, context_text) ->
short answer. The tool builds the evidence — the padded, upscaled crop (as visual_detail)
and the region's text in reading order (as text_recovery) — calls the reader once, and
returns the answer grounded in the region. A reader that fails yields an error observation.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from tools.errors import DossierError
from tools.perception.context import PerceptionContext
from tools.perception.observation import Observation, parse_region
from tools.perception.page import words_text
from tools.perception.visual import crop_region

__all__ = ["targeted_lookup", "prepare_lookup", "LookupRequest"]

MAX_ANSWER_CHARS = 2000  # a reader's answer is cut here so one call cannot flood the context


@dataclass(slots=True)
class LookupRequest:
    """What the reader of a targeted lookup sees: the question, the region's crop and its text.

    An agent whose model runs in an engine loop (Q-Guide's) cannot call the reader from a tool
    thread; it prepares the request here, runs the reader as its own model turn, and turns the
    reply into the observation with `observation(answer)`.
    """

    document: str
    page: int
    region: list[float]  # normalised l, t, r, b the lookup reads
    question: str
    image: Image.Image  # the padded, upscaled crop (as visual_detail)
    text: str  # the region's words in reading order (as text_recovery)
    text_source: str  # 'pdf' or 'ocr:<backend>'

    def observation(self, answer: str) -> Observation:
        return Observation("targeted_lookup", self.document, self.page, list(self.region),
                           {"question": self.question, "answer": answer.strip()[:MAX_ANSWER_CHARS],
                            "text_source": self.text_source})


def prepare_lookup(ctx: PerceptionContext, document: str, page: int, question: str, region=None) -> LookupRequest:
    """The evidence for one lookup, without calling the reader.

    Raises:
        DossierError: empty question, unknown document or page, bad region.
    """
    if not isinstance(question, str) or not question.strip():
        raise DossierError(f"question must be a non-empty string, got {question!r}")
    box = parse_region(region)
    image, _, _ = crop_region(ctx, document, page, box)
    view = ctx.view(document, page)
    words, origin = ctx.region_words(view, view.rect(box))
    return LookupRequest(document, page, list(box), question.strip(), image, words_text(words), origin)


def targeted_lookup(ctx: PerceptionContext, document: str, page: int, question: str, region=None) -> Observation:
    """Answer `question` from one region.

    Returns:
        content = {"question", "answer", "text_source"}.

    Raises:
        DossierError: no reader configured, empty question, or the reader failed.
    """
    if ctx.reader is None:
        raise DossierError("targeted_lookup needs a model: create the toolkit with reader=... (the engine supplies one)")
    request = prepare_lookup(ctx, document, page, question, region)
    try:
        answer = ctx.reader(request.question, request.image, request.text)
    except Exception as err:  # the model is the engine's; its failure costs this call only
        raise DossierError(f"the reader failed on this question: {type(err).__name__}: {str(err)[:200]}") from None
    if not isinstance(answer, str):
        raise DossierError(f"the reader must return a string, returned {type(answer).__name__}")
    return request.observation(answer)
