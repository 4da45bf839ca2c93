"""Comparing two runs' searching, question by question: first-query hit and gold pages found within a budget.

For each gold item with evidence (paired across the two runs by id; an item without an episode
in a run counts as a miss there):
- first-query hit: the episode's first search returned a gold page (MADQA's cold-start measure);
- gold page within the budget: some search among the first N returned a gold page, and the
  share of the item's gold pages they returned (page recall within the budget). N defaults to
  every search the episode made (the run's own step budget).
Each rate gets a Wilson interval; the paired difference an exact McNemar test on the items where
the runs disagree. This is what fine-tuning query formulation should move, even when a small
model's answers stay wrong.
"""

from __future__ import annotations

from pathlib import Path

from engine.datasets.formats import Question
from engine.eval.stats import mcnemar_exact, wilson_interval
from engine.eval.trajectories import Episode

__all__ = ["search_outcomes", "compare_searches", "load_run_searches"]


def search_outcomes(questions: list[Question], episodes: dict[str, Episode], budget: int | None) -> dict[str, dict]:
    """{item id: {"first_hit", "hit_within_budget", "recall_within_budget"}} for items with gold evidence."""
    out = {}
    for q in questions:
        if not q.evidence:
            continue
        gold = {(e.document, e.page) for e in q.evidence}
        episode = episodes.get(q.id)
        searches = episode.searches if episode is not None else []
        within = searches if budget is None else searches[:budget]
        found = {(p.document, p.page) for s in within for p in s.pages} & gold
        first = {(p.document, p.page) for p in searches[0].pages} if searches else set()
        out[q.id] = {"first_hit": bool(first & gold), "hit_within_budget": bool(found),
                     "recall_within_budget": len(found) / len(gold)}
    return out


def _rate(values: list[bool]) -> dict:
    hits, n = sum(values), len(values)
    low, high = wilson_interval(hits, n)
    return {"hits": hits, "n": n, "rate": hits / n if n else None, "ci": [low, high]}


def compare_searches(questions: list[Question], episodes_a: dict[str, Episode], episodes_b: dict[str, Episode],
                     budget: int | None = None) -> dict:
    """Paired first-query hit and within-budget comparison of two runs (see the module docstring)."""
    a = search_outcomes(questions, episodes_a, budget)
    b = search_outcomes(questions, episodes_b, budget)
    ids = [i for i in a if i in b]
    result = {"n_paired": len(ids), "budget": budget}
    for key in ("first_hit", "hit_within_budget"):
        only_a = sum(1 for i in ids if a[i][key] and not b[i][key])
        only_b = sum(1 for i in ids if b[i][key] and not a[i][key])
        result[key] = {"a": _rate([a[i][key] for i in ids]), "b": _rate([b[i][key] for i in ids]),
                       "only_a": only_a, "only_b": only_b, "mcnemar_p": mcnemar_exact(only_a, only_b)}
    result["recall_within_budget"] = {side: (sum(o[i]["recall_within_budget"] for i in ids) / len(ids) if ids else None)
                                      for side, o in (("a", a), ("b", b))}
    return result


def load_run_searches(source: Path, gold: Path | None = None) -> tuple[list[Question], dict[str, Episode]] | None:
    """(gold questions, episodes by id) of a run directory with trajectories; None for anything else."""
    from engine.eval.inputs import load_inputs

    path = Path(source)
    if not path.is_dir() or not (path / "trajectories.jsonl").is_file():
        return None
    inputs = load_inputs(path, gold)
    return inputs.questions, {e.id: e for e in inputs.episodes or [] if e.id is not None}
