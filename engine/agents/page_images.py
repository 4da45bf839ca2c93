"""Page images for vision-language agents: pages rendered by the corpus store, labelled as MADQA's agent does.

MADQA's BM25 agent appends each search hit to the conversation as the rendered page
image (not its text). Here every page is rendered by `CorpusStore.render` (DPI and pixel
cap from `RenderSettings`, cached as PNG in the corpus) and preceded by the line
`File: {document}, Page: {page}`. The model then resizes it within its own
`min_pixels` / `max_pixels` (`EngineConfig.image_min_pixels` / `image_max_pixels`);
`processor.image_tokens(image)` gives its token cost before it is appended.

    parts = page_image_message(store, [("report", 3), ("report", 12)], RenderSettings(dpi=100))
    session.append_message("user", parts)
"""

from models.vision import page_image_content

__all__ = ["page_image_message", "render_pages"]


def render_pages(store, pages, settings=None) -> list[tuple[str, int, object]]:
    """(document, page, PIL RGB image) for each (document, page), rendered by the corpus store.

    Raises:
        DossierError: an unknown document or page (the message names it).
    """
    return [(document, int(page), store.render(document, int(page), settings)) for document, page in pages]


def page_image_message(store, pages, settings=None, text: str | None = None) -> list[dict]:
    """Message content showing the pages as labelled images (see `models.vision.page_image_content`).

    Args:
        store: a `tools.corpus.CorpusStore`.
        pages: (document, page) pairs, pages 1-indexed, e.g. the hits of a search.
        settings: `tools.corpus.RenderSettings` (DPI and pixel cap); None for the store's default.
        text: optional text before the pages (e.g. "Search results for: ...").
    """
    return page_image_content(render_pages(store, pages, settings), text)
