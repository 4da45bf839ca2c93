"""Q-Guide's entry in the agent registry: one episode per question, a loop or a chunked document.

    collection question (no `document`: MADQA, FinanceBench)   one loop; tools include BM25 search
    named document of at most `chunk_pages` pages              one loop with all its pages in context
    longer named document (DocVQA-2026 spans up to ~180 pages) one loop per overlapping chunk, adjudicated
"""

from __future__ import annotations

from engine.agents.qguide.chunked import ChunkedEpisode
from engine.agents.qguide.config import setup_for
from engine.agents.qguide.longdoc import chunk_ranges
from engine.agents.qguide.loop import Loop

__all__ = ["build"]


def build(question, settings, env):
    """The episode for one question (the registry's factory)."""
    setup = setup_for(question, settings, env)
    if setup.collection:
        return Loop(question, settings, env, setup, [], settings.max_rounds)
    ranges = chunk_ranges(setup.page_count, settings.chunk_pages, settings.chunk_overlap)
    if len(ranges) == 1:
        return Loop(question, settings, env, setup, list(range(1, setup.page_count + 1)), settings.max_rounds)
    return ChunkedEpisode(question, settings, env, setup, ranges)
