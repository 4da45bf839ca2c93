"""Silver trajectories: short keyword queries that put a gold page in BM25's top k, found by search.

Where no person has searched a collection, the question and its gold page still say which
queries would have worked. For each question, candidate queries are combinations of up to
`max_terms` keywords: the question's own words that also occur on a gold page (rarest in the
corpus first), optionally with one distinctive word of the gold page the question lacks (its
tf-idf highest; numbers are never used, since the answer is often one). Each candidate is
searched exactly as the agent's search tool would (same query language, same k); those that
return a gold page are kept, ranked: question words only first, then those holding the rarest
question word (most often the company), then a better gold rank, then about three words.

Each mined question becomes an episode replayed through the agent's own state machine — the
best query as a search turn, then an answer turn with the gold answer citing the gold pages
found — so the trajectory has the runner's exact input deltas. It is marked `"source":
"silver"`, and every mined query is listed under `"silver"`.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from dataclasses import dataclass

from engine.agents.actions import ToolJob, Turn
from engine.agents.bm25 import Episode
from engine.agents.settings import AgentSettings
from engine.datasets.formats import Question
from tools.errors import DossierError
from tools.search.tokenize import analyze

__all__ = ["MineConfig", "MinedQuery", "mine_question", "silver_episode"]


@dataclass(slots=True)
class MineConfig:
    max_terms: int = 4  # most keywords in a mined query
    pool: int = 8  # question words tried: those on a gold page, rarest in the corpus first
    page_terms: int = 3  # distinctive gold-page words (not in the question) tried beside question words
    max_queries: int = 5  # successful queries kept per question
    max_searches: int = 400  # searches tried per question at most

    def __post_init__(self):
        for name in ("max_terms", "pool", "max_queries", "max_searches"):
            if getattr(self, name) < 1:
                raise DossierError(f"{name} must be at least 1 (got {getattr(self, name)})")
        if self.page_terms < 0:
            raise DossierError(f"page_terms must be 0 or more (got {self.page_terms})")


@dataclass(slots=True)
class MinedQuery:
    query: str  # the keywords, space-separated (AND-ed by the query language)
    question_terms: int  # how many of its words come from the question
    page_terms: int  # how many come only from the gold page
    gold_rank: int  # rank of the first gold page in its results (1 = top)
    pages: list[dict]  # the pages it returned, best first

    def to_json(self) -> dict:
        return {"query": self.query, "question_terms": self.question_terms, "page_terms": self.page_terms,
                "gold_rank": self.gold_rank, "pages": self.pages}


def _is_number(token: str) -> bool:
    return any(ch.isdigit() for ch in token) and not any(ch.isalpha() for ch in token)


def mine_question(env, question: Question, settings: AgentSettings, config: MineConfig) -> tuple[list[MinedQuery], int]:
    """Queries that return a gold page of `question` in the top `settings.k`; returns (queries, searches tried)."""
    searcher = env.searcher
    index = searcher.index
    gold = {(e.document, e.page) for e in question.evidence}

    def df(token: str) -> int:
        token_id = index.token_id(token)
        return 0 if token_id is None else len(index.positions.pages(token_id))

    page_counts: Counter = Counter()
    for document, page in sorted(gold):
        try:
            page_counts.update(t.text for t in analyze(env.store.page(document, page).text))
        except DossierError:
            continue  # a gold page missing from the corpus: nothing to mine from it
    asked = list(dict.fromkeys(t.text for t in analyze(question.question) if len(t.text) > 1))  # "s" of "3M's"
    shared = sorted((t for t in asked if t in page_counts and df(t) > 0), key=lambda t: (df(t), asked.index(t)))
    shared = shared[:config.pool]
    answer_words = {t.text for variant in question.answer_variants for part in variant for t in analyze(part)}
    pages_total = max(index.num_pages, 1)
    extra = [t for t in page_counts if t not in asked and t not in answer_words and not _is_number(t) and df(t) > 1]
    extra.sort(key=lambda t: (-page_counts[t] * math.log(pages_total / df(t)), t))
    extra = extra[:config.page_terms]
    candidates: list[tuple[tuple[str, ...], str | None]] = []
    for size in range(1, config.max_terms + 1):
        candidates += [(combo, None) for combo in itertools.combinations(shared, size)]
    for word in extra:
        for size in range(1, config.max_terms):
            candidates += [(combo, word) for combo in itertools.combinations(shared, size)]
    found: list[MinedQuery] = []
    tried = 0
    for combo, word in candidates[:config.max_searches]:
        ordered = sorted(combo, key=asked.index) + ([word] if word else [])
        query = " ".join(ordered)
        hits, error = env.search(query, settings.k)
        tried += 1
        if error is not None:
            continue
        pages = [{"document": h.document, "page": h.page} for h in hits]
        rank = next((r for r, h in enumerate(hits, start=1) if (h.document, h.page) in gold), None)
        if rank is not None:
            found.append(MinedQuery(query, len(combo), int(word is not None), rank, pages))
    # the rarest question word is most often the company or product: queries with it teach one consistent habit
    rarest = shared[0] if shared else None
    found.sort(key=lambda m: (m.page_terms, rarest not in m.query.split(), m.gold_rank,
                              abs(m.question_terms + m.page_terms - 3), m.query))
    return found[:config.max_queries], tried


def silver_episode(env, question: Question, settings: AgentSettings, mined: list[MinedQuery], tried: int,
                   config: MineConfig) -> tuple[dict, object]:
    """(trajectory, prediction) of a question, replayed through the agent's state machine.

    With a mined query: a search turn with the best query, then an answer turn with the gold
    answer citing the gold pages that search returned. Without one: an episode with no steps.
    """
    episode = Episode(question, settings, env)
    turn = episode.first_turn()
    if mined:
        best = mined[0]
        action = episode.on_output(json.dumps({"tool": "search", "query": best.query}), turn, {}, 0.0)
        assert isinstance(action, ToolJob), "a mined query must parse as a search call"
        episode.on_tool_result(action.run())
        gold = {(e.document, e.page) for e in question.evidence}
        cited = [p for p in best.pages if (p["document"], p["page"]) in gold]
        answer = question.answer_variants[0] if question.answer_variants else [""]
        final_turn = Turn([], allow_search=False)  # the answer as a forced final turn would take it
        episode.on_output(json.dumps({"tool": "answer", "answer": answer, "citations": cited}), final_turn, {}, 0.0)
    else:
        episode.fail("no_query_found")
    trajectory = episode.trajectory()
    trajectory["source"] = "silver"
    trajectory["silver"] = {"queries": [m.to_json() for m in mined], "searches_tried": tried, "k": settings.k,
                            "mode": settings.search_mode, "max_terms": config.max_terms}
    prediction = episode.prediction()
    prediction.extra["source"] = "silver"
    return trajectory, prediction
