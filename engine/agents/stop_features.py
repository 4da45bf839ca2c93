"""Features of an episode after a search, for the learned stop rule; and the label "searching on won't help".

The decision point is right after a search result arrives, before the model's next turn. The
features use only what the agent has at that moment (its own steps), so the same function
serves training (over recorded trajectories) and the run (over a live episode's steps):

    searches                 searches so far
    turns_left               model turns still allowed (the run's max_iterations minus steps so far)
    pages_seen               distinct pages returned so far
    new_pages                pages this search returned that no earlier search had
    new_share                new_pages / pages this search returned (0 when it returned none)
    empty_searches           searches so far that returned nothing or failed
    searches_since_new_page  searches in a row, ending now, that added no new page
    query_overlap            highest word overlap (Jaccard) of this query with an earlier one
    repeated_query           this query's words equal an earlier query's
    question_overlap         share of this query's words that are in the question
    top_document_share       share of all returned pages that belong to the most returned document
    searches_since_top_page  searches since a new page of that document last appeared: the "time since
                             the last new gold-looking page" (a page of the document the searches keep
                             returning is what a gold page looks like from the inside)

Label of a search (training only): 1 when no later search of the episode returned a gold page
that the searches so far had not — searching on did not help — and 0 when one did.
"""

from __future__ import annotations

from collections import Counter

from tools.search.tokenize import analyze

__all__ = ["FEATURES", "step_features", "episode_examples"]

FEATURES = ("searches", "turns_left", "pages_seen", "new_pages", "new_share", "empty_searches",
            "searches_since_new_page", "query_overlap", "repeated_query", "question_overlap", "top_document_share",
            "searches_since_top_page")


def _words(text: str) -> frozenset[str]:
    return frozenset(t.text for t in analyze(text or ""))


def _search(step: dict) -> tuple[str, list[tuple[str, int]]] | None:
    call = step.get("tool_call")
    if not isinstance(call, dict) or call.get("name") != "search":
        return None
    result = step.get("tool_result") if isinstance(step.get("tool_result"), dict) else {}
    pages = []
    for page in result.get("pages") or []:
        if isinstance(page, dict):
            try:
                pages.append((str(page.get("document")), int(page.get("page"))))
            except (TypeError, ValueError):
                continue
    return str((call.get("arguments") or {}).get("query") or ""), pages


def step_features(steps: list[dict], question: str, max_iterations: int) -> list[float] | None:
    """Features after the last step (which must be a search with its result); None when it is not a search."""
    searches = [s for s in map(_search, steps) if s is not None]
    if not steps or _search(steps[-1]) is None:
        return None
    seen: set[tuple[str, int]] = set()
    documents: Counter = Counter()
    since_new = since_top = 0
    empty = 0
    new_pages = 0
    for number, (_query, pages) in enumerate(searches):
        fresh = [p for p in dict.fromkeys(pages) if p not in seen]
        top_before = documents.most_common(1)[0][0] if documents else None
        seen.update(fresh)
        documents.update(d for d, _ in pages)
        top = documents.most_common(1)[0][0] if documents else None
        empty += not pages
        since_new = 0 if fresh else since_new + 1
        since_top = 0 if any(d in (top, top_before) for d, _ in fresh) else since_top + 1
        if number == len(searches) - 1:
            new_pages = len(fresh)
    query, pages = searches[-1]
    words = _words(query)
    earlier = [_words(q) for q, _ in searches[:-1]]
    overlap = max((len(words & w) / len(words | w) for w in earlier if words | w), default=0.0)
    asked = _words(question)
    total = sum(documents.values())
    return [float(len(searches)), float(max_iterations - len(steps)), float(len(seen)), float(new_pages),
            new_pages / len(pages) if pages else 0.0, float(empty), float(since_new), overlap,
            float(any(words == w for w in earlier)), len(words & asked) / len(words) if words else 0.0,
            documents.most_common(1)[0][1] / total if total else 0.0, float(since_top)]


def episode_examples(steps: list[dict], question: str, gold: set[tuple[str, int]],
                     max_iterations: int) -> list[tuple[list[float], int]]:
    """(features, label) after every search of a recorded episode; label 1 = later searches found no new gold page."""
    found_at: list[set] = []  # gold pages first returned by each search
    rows = []
    seen_gold: set = set()
    for index, step in enumerate(steps):
        search = _search(step)
        if search is None:
            continue
        new_gold = {p for p in search[1] if p in gold and p not in seen_gold}
        seen_gold |= new_gold
        found_at.append(new_gold)
        rows.append(step_features(steps[:index + 1], question, max_iterations))
    labels = [int(not any(found_at[j] for j in range(i + 1, len(found_at)))) for i in range(len(found_at))]
    return [(features, label) for features, label in zip(rows, labels) if features is not None]
