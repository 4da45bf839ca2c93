"""Trajectory analyses: accuracy at a step budget, first-query hit rate, query drift.

- Accuracy at budget N (MADQA Figure 9): the answer the agent would have given had it been
  stopped after N searches — its last `answer` call made while at most N searches had been
  issued. An episode with no such answer, or a gold item without an episode, counts as wrong.
  A per-document child's answer (a step with a `document`) answers a sub-question, not the
  question: its searches count, its answer does not.
- First-query hit rate (MADQA Figure 22): the share of episodes whose first search returned
  a gold page (a gold document); an episode that never searched is a miss. Items without
  gold evidence are left out.
- Query drift (MADQA Figure 24): per episode with two or more queries, the mean of
  1 - cosine(consecutive query embeddings). The embedding model (all-MiniLM-L6-v2) is only
  loaded when drift is asked for; see `engine/eval/embeddings.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import median

import numpy as np

from engine.datasets.formats import Evidence
from engine.eval.trajectories import Episode

__all__ = ["answer_at_budget", "accuracy_at_budgets", "first_query_hits", "query_drift"]


def answer_at_budget(episode: Episode, budget: int) -> tuple[bool, str | list[str] | None]:
    """(found, answer): the last answer given while at most `budget` searches had been issued."""
    searches = 0
    found, answer = False, None
    for step in episode.steps:
        if step.tool == "search":
            searches += 1
        elif step.tool == "answer" and step.document is None and searches <= budget:
            found, answer = True, step.answer
    return found, answer


def accuracy_at_budgets(
    items: Sequence[tuple[str, list[list[str]]]],
    episodes: dict[str, Episode],
    is_correct: Callable[[str | list[str] | None, list[list[str]]], bool],
    max_budget: int | None = None,
) -> list[dict]:
    """Accuracy for every budget N = 0..max_budget over all gold items.

    Args:
        items: (item id, gold variants) for every gold item; the denominator.
        episodes: item id -> its episode.
        is_correct: scores an answer against gold variants (ANLS* >= 0.5 in `dossier eval`).
        max_budget: the largest N; defaults to the most searches any episode made.

    Returns:
        [{"budget": N, "accuracy": a, "correct": k, "n": n}, ...]
    """
    if max_budget is None:
        max_budget = max((len(e.searches) for e in episodes.values()), default=0)
    n = len(items)
    rows = []
    for budget in range(max_budget + 1):
        correct = 0
        for item_id, variants in items:
            episode = episodes.get(item_id)
            if episode is None:
                continue
            found, answer = answer_at_budget(episode, budget)
            correct += found and is_correct(answer, variants)
        rows.append({"budget": budget, "accuracy": correct / n if n else 0.0, "correct": correct, "n": n})
    return rows


def first_query_hits(items: Sequence[tuple[str, list[Evidence]]], episodes: dict[str, Episode]) -> dict:
    """First-search hit rates at page and document level over items with gold evidence and an episode."""
    page_hits = doc_hits = n = 0
    for item_id, evidence in items:
        episode = episodes.get(item_id)
        if episode is None or not evidence:
            continue
        n += 1
        searches = episode.searches
        if not searches:
            continue
        returned = searches[0].pages
        gold_pages = {(e.document, e.page) for e in evidence}
        gold_docs = {e.document for e in evidence}
        page_hits += any((p.document, p.page) in gold_pages for p in returned)
        doc_hits += any(p.document in gold_docs for p in returned)
    return {
        "page_hit_rate": page_hits / n if n else None,
        "doc_hit_rate": doc_hits / n if n else None,
        "page_hits": page_hits,
        "doc_hits": doc_hits,
        "n": n,
    }


def query_drift(
    episodes: dict[str, Episode],
    correct: dict[str, bool],
    embed: Callable[[list[str]], np.ndarray],
) -> dict:
    """Mean cosine drift per step, over episodes with at least two non-empty queries.

    Args:
        episodes: item id -> episode.
        correct: item id -> whether the item was answered correctly (for the split by outcome).
        embed: texts -> (len(texts), dim) array of embeddings (normalised or not).

    Returns:
        {"mean", "median", "n", "mean_correct", "mean_incorrect", "per_episode": {id: drift}}
    """
    queries = {item_id: [s.query for s in e.searches if s.query and s.query.strip()] for item_id, e in episodes.items()}
    queries = {k: v for k, v in queries.items() if len(v) >= 2}
    unique = sorted({q for qs in queries.values() for q in qs})
    per_episode: dict[str, float] = {}
    if unique:
        vectors = np.asarray(embed(unique), dtype=np.float64)  # (unique queries, dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms == 0, 1.0, norms)
        index = {q: i for i, q in enumerate(unique)}
        for item_id, qs in queries.items():
            rows = vectors[[index[q] for q in qs]]
            cosines = np.sum(rows[:-1] * rows[1:], axis=1)
            per_episode[item_id] = float(np.mean(1.0 - cosines))
    values = list(per_episode.values())
    right = [d for i, d in per_episode.items() if correct.get(i)]
    wrong = [d for i, d in per_episode.items() if not correct.get(i)]
    return {
        "mean": float(np.mean(values)) if values else None,
        "median": float(median(values)) if values else None,
        "n": len(values),
        "mean_correct": float(np.mean(right)) if right else None,
        "mean_incorrect": float(np.mean(wrong)) if wrong else None,
        "per_episode": per_episode,
    }
