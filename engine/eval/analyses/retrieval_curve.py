"""Search trajectories as MADQA plots them: cumulative gold hits by iteration (Fig. 22), recovery (Fig. 23).

- Cumulative hits (Figure 22): over questions with gold evidence and an episode, the share whose
  searches 1..i returned a gold document (a gold page), for i = 1..T, T the most searches any
  episode made. An episode with fewer than i searches keeps what it had found; one that never
  searched is a miss at every i. Both curves never fall.
- Recovery after a failed first query (Figure 23): among questions whose first search returned
  no gold document (episodes with at least one search; those that never searched are counted
  apart), the ones whose later searches returned one are `recovered`. Accuracy (the item's
  `correct`) is reported among the recovered, the not recovered and all that needed recovery,
  each with a Wilson interval.
A search's returned pages are those the trajectory records in the step's tool_result.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.datasets.formats import Evidence
from engine.eval.stats import wilson_interval
from engine.eval.trajectories import Episode

__all__ = ["cumulative_hits", "recovery_after_failed_first_query", "first_hits"]


def first_hits(episode: Episode, evidence: Sequence[Evidence]) -> tuple[int | None, int | None]:
    """(1-based search at which a gold document was first returned, the same for a gold page); None: never."""
    gold_docs = {e.document for e in evidence}
    gold_pages = {(e.document, e.page) for e in evidence}
    doc_at = page_at = None
    for i, search in enumerate(episode.searches, start=1):
        if doc_at is None and any(p.document in gold_docs for p in search.pages):
            doc_at = i
        if page_at is None and any((p.document, p.page) in gold_pages for p in search.pages):
            page_at = i
    return doc_at, page_at


def _with_episodes(items: Sequence[tuple[str, list[Evidence], bool]], episodes: dict[str, Episode]):
    return [(item_id, evidence, correct, episodes[item_id]) for item_id, evidence, correct in items
            if evidence and item_id in episodes]


def cumulative_hits(items: Sequence[tuple[str, list[Evidence], bool]], episodes: dict[str, Episode]) -> dict:
    """Figure 22's curves.

    Args:
        items: (item id, gold evidence, correct) per gold item.
        episodes: item id -> its episode.

    Returns:
        {"n": questions counted, "iterations": [{"i", "doc_rate", "page_rate", "doc_hits", "page_hits"}, ...]};
        empty iterations when no episode searched.
    """
    kept = _with_episodes(items, episodes)
    firsts = [first_hits(episode, evidence) for _, evidence, _, episode in kept]
    most = max((len(episode.searches) for *_, episode in kept), default=0)
    n = len(kept)
    rows = []
    for i in range(1, most + 1):
        doc_hits = sum(1 for doc_at, _ in firsts if doc_at is not None and doc_at <= i)
        page_hits = sum(1 for _, page_at in firsts if page_at is not None and page_at <= i)
        rows.append({"i": i, "doc_rate": doc_hits / n, "page_rate": page_hits / n,
                     "doc_hits": doc_hits, "page_hits": page_hits})
    return {"n": n, "iterations": rows}


def _share(k: int, n: int, level: float) -> dict:
    return {"k": k, "n": n, "rate": k / n if n else None, "ci": list(wilson_interval(k, n, level)) if n else None}


def recovery_after_failed_first_query(items: Sequence[tuple[str, list[Evidence], bool]],
                                      episodes: dict[str, Episode], level: float = 0.95) -> dict:
    """Figure 23: how often, and how well, an agent recovers when its first search misses every gold document.

    Returns:
        {"n": questions with gold evidence and an episode, "never_searched": ..., "needing_recovery": ...,
         "recovered": share, "accuracy_recovered": share, "accuracy_not_recovered": share,
         "accuracy_needing_recovery": share, "accuracy_first_hit": share}; each share is
         {"k", "n", "rate", "ci"}.
    """
    kept = _with_episodes(items, episodes)
    never = [correct for _, _, correct, episode in kept if not episode.searches]
    recovered, lost, first_hit = [], [], []
    for _, evidence, correct, episode in kept:
        if not episode.searches:
            continue
        doc_at, _ = first_hits(episode, evidence)
        (first_hit if doc_at == 1 else recovered if doc_at is not None else lost).append(correct)
    needing = recovered + lost
    return {
        "n": len(kept),
        "never_searched": len(never),
        "needing_recovery": len(needing),
        "recovered": _share(len(recovered), len(needing), level),
        "accuracy_recovered": _share(sum(recovered), len(recovered), level),
        "accuracy_not_recovered": _share(sum(lost), len(lost), level),
        "accuracy_needing_recovery": _share(sum(needing), len(needing), level),
        "accuracy_first_hit": _share(sum(first_hit), len(first_hit), level),
    }
