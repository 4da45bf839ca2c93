"""Q-Guide's entry in the agent registry: one episode per question, a loop, a chunked or a retrieved document.

    collection question (no `document`: MADQA, FinanceBench)   one loop; tools include BM25 search
    named document of at most `chunk_pages` pages              one loop with all its pages in context
    longer named document (DocVQA-2026 spans up to ~180 pages):
        --longdoc chunk     one loop per overlapping chunk, adjudicated (Eq. 4; the paper's choice)
        --longdoc retrieve  one loop over the `chunk_pages` pages BM25 ranks best for the question
                            within the document (page-level retrieval, the paper's comparison:
                            65.0 % chunked vs 50.0 % retrieved on DocVQA-2026, Section 5.5)
"""

from __future__ import annotations

from engine.agents.qguide.chunked import ChunkedEpisode
from engine.agents.qguide.config import option, setup_for
from engine.agents.qguide.longdoc import chunk_ranges
from engine.agents.qguide.loop import Loop

__all__ = ["build", "retrieve_pages"]


def retrieve_pages(env, document: str, question: str, pages: int, page_count: int) -> dict:
    """The `pages` pages of `document` BM25 ranks best for `question` (free text), in page order.

    Returns:
        {"pages": [...], "hits": [{"page", "score"}], "note"}: when fewer pages match than asked
        for, the pages that match; when none does, the first `pages` pages, and the note says so.
    """
    hits, error = env.search(question, pages, mode="bag", document=document)
    chosen = sorted({h.page for h in hits})
    note = ""
    if error is not None or not chosen:
        chosen = list(range(1, min(pages, page_count) + 1))
        note = f"no page of {document} matches the question ({error or 'no hit'}): its first pages are read"
    return {"pages": chosen, "hits": [{"page": h.page, "score": round(float(h.score), 4)} for h in hits], "note": note}


def build(question, settings, env):
    """The episode for one question (the registry's factory)."""
    setup = setup_for(question, settings, env)
    if setup.collection:
        return Loop(question, settings, env, setup, [], settings.max_rounds)
    if setup.page_count > settings.chunk_pages and option(settings, "longdoc") == "retrieve":
        retrieval = retrieve_pages(env, setup.document, question.question, settings.chunk_pages, setup.page_count)
        return Loop(question, settings, env, setup, retrieval["pages"], settings.max_rounds, retrieval=retrieval)
    ranges = chunk_ranges(setup.page_count, settings.chunk_pages, settings.chunk_overlap)
    if len(ranges) == 1:
        return Loop(question, settings, env, setup, list(range(1, setup.page_count + 1)), settings.max_rounds)
    return ChunkedEpisode(question, settings, env, setup, ranges)
