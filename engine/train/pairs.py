"""Supervised pairs for query formulation: (the agent's own prompt at a search turn, a search that worked).

A pair's prompt is exactly what the rollout runner would have fed the model before that turn:
the episode is replayed through the agent's own state machine (`engine.agents.bm25.Episode`)
with the settings the tuned model will run with, so the system prompt, the question, the
turns-left footers and every earlier observation are rendered by the same code as at run time.
Earlier searches are re-run against the corpus to rebuild their observations, so pairs after
the first search need `env`; first-search pairs need nothing but the question.

The target is the search tool call, as one JSON object, of a search turn whose results held a
gold page. Filters: first query only, successful episodes only (final answer ANLS* >= 0.5),
chosen annotators, chosen sources.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from engine.agents.actions import Done, ToolJob
from engine.agents.bm25 import Episode
from engine.agents.registry import agent_spec
from engine.agents.settings import AgentSettings
from engine.train.records import SOURCES, TrajectoryRecord

__all__ = ["PairFilter", "QueryPair", "build_pairs", "search_target", "gold_rank", "split_pairs"]


@dataclass(slots=True)
class PairFilter:
    first_query_only: bool = False  # only an episode's first search turn
    successful_only: bool = False  # only episodes whose final answer is correct (ANLS* >= 0.5)
    annotators: tuple[str, ...] = ()  # only human trajectories by these annotators (empty: everyone)
    sources: tuple[str, ...] = SOURCES  # which sources to learn from (human, agent, silver)
    silver_variants: int = 1  # for silver episodes: how many mined queries per question become targets


@dataclass(slots=True)
class QueryPair:
    """One training example: the conversation before a search turn and the search to produce."""

    question_id: str
    documents: list[str]  # the question's gold documents (decide its side of the split)
    source: str  # human, agent or silver
    annotator: str | None
    step: int  # the search turn's step number in its episode (1-based)
    search_number: int  # 1 for the episode's first search
    messages: list[tuple[str, str]]  # (role, content) before the turn; earlier model turns as "assistant"
    target: str  # the tool call the model should generate: {"tool": "search", "query": ...}
    query: str
    gold_rank: int  # rank of the first gold page among the search's results (1 = top)

    def to_json(self) -> dict:
        return {"question_id": self.question_id, "documents": self.documents, "source": self.source,
                "annotator": self.annotator, "step": self.step, "search_number": self.search_number,
                "messages": [list(m) for m in self.messages], "target": self.target, "query": self.query,
                "gold_rank": self.gold_rank}


def search_target(query: str) -> str:
    """The search call as the structured-output schema writes it ("tool" first)."""
    return json.dumps({"tool": "search", "query": query}, ensure_ascii=False)


def gold_rank(pages: list, gold: set[tuple[str, int]]) -> int | None:
    """1-based rank of the first gold page among a search's result pages, None when there is none."""
    for rank, page in enumerate(pages, start=1):
        if isinstance(page, dict) and (str(page.get("document")), _page(page.get("page"))) in gold:
            return rank
    return None


def _page(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _search_of(step: dict) -> tuple[str, list] | None:
    call = step.get("tool_call")
    if not isinstance(call, dict) or call.get("name") != "search":
        return None
    query = (call.get("arguments") or {}).get("query")
    if not isinstance(query, str) or not query.strip():
        return None
    result = step.get("tool_result") if isinstance(step.get("tool_result"), dict) else {}
    return query.strip(), result.get("pages") or []


def _step_number(step: dict, index: int) -> int:
    try:
        return int(step.get("step") or index + 1)
    except (TypeError, ValueError):
        return index + 1


def _is_agent_turn(step: dict) -> bool:
    call = step.get("tool_call")
    return not isinstance(call, dict) or call.get("name") in ("search", "answer")


def _model_text(step: dict) -> str | None:
    """What the model said at a step: its raw output, else the canonical JSON of its call (human steps)."""
    if isinstance(step.get("raw_output"), str) and step["raw_output"].strip():
        return step["raw_output"]
    call = step.get("tool_call")
    if isinstance(call, dict) and call.get("name"):
        return json.dumps({"tool": call["name"], **(call.get("arguments") or {})}, ensure_ascii=False)
    return None


def _is_successful(record: TrajectoryRecord, scorer) -> bool:
    final = record.raw.get("final") if isinstance(record.raw.get("final"), dict) else {}
    return scorer(final.get("answer"), record.question.answer_variants) >= 0.5


def build_pairs(records: list[TrajectoryRecord], settings: AgentSettings, env=None,
                filters: PairFilter | None = None) -> tuple[list[QueryPair], Counter]:
    """Pairs from trajectories, replayed with the agent settings the tuned model will run with.

    Args:
        records: episodes with their gold questions (see `engine.train.records`).
        settings: the bm25 agent's settings at run time (k, max_iterations, prompts).
        env: the corpus environment; needed to rebuild observations before later search turns.
        filters: which turns and episodes count (default: every search turn that found a gold page).

    Returns:
        (pairs, skipped): the pairs, and a count of why episodes or turns gave none.
    """
    from engine.eval.metrics.anls import ANLSScorer

    filters = filters or PairFilter()
    if agent_spec(settings.agent).factory != f"{Episode.__module__}:{Episode.__name__}":  # replayed by that loop
        raise ValueError(f"query pairs are built for the bm25 agent's prompt, not {settings.agent!r}")
    scorer = ANLSScorer()
    pairs: list[QueryPair] = []
    skipped: Counter = Counter()
    for record in records:
        if record.source not in filters.sources:
            skipped["source not selected"] += 1
            continue
        if filters.annotators and record.source == "human" and record.annotator not in filters.annotators:
            skipped["annotator not selected"] += 1
            continue
        if filters.successful_only and not _is_successful(record, scorer):
            skipped["episode not successful"] += 1
            continue
        found = _episode_pairs(record, settings, env, filters, skipped)
        if not found:
            skipped["no search turn found a gold page"] += 1
        pairs += found
    return pairs, skipped


def _episode_pairs(record: TrajectoryRecord, settings: AgentSettings, env, filters: PairFilter,
                   skipped: Counter) -> list[QueryPair]:
    question = record.question
    gold = {(e.document, e.page) for e in question.evidence}
    documents = sorted({e.document for e in question.evidence})
    episode = Episode(question, settings, env)
    turn = episode.first_turn()
    history: list[tuple[str, str]] = list(turn.messages)
    # steps the agent's conversation has: its tool calls and malformed turns; a person's page views and
    # evidence marks in the studio are not turns of the agent and are left out of the replay
    steps = [s for s in record.raw["steps"] if isinstance(s, dict) and _is_agent_turn(s)]
    out: list[QueryPair] = []
    searches = 0
    for index, step in enumerate(steps):
        search = _search_of(step)
        if search is not None:
            searches += 1
            query, pages = search
            rank = gold_rank(pages, gold)
            if rank is not None and turn.allow_search:
                out.append(QueryPair(question.id, documents, record.source, record.annotator, _step_number(step, index), searches,
                                     list(history), search_target(query), query, rank))
            if filters.first_query_only:
                break
        if index == len(steps) - 1:
            break
        text = _model_text(step)
        if text is None:
            skipped["a step without output or call stopped the replay"] += 1
            break
        if env is None:
            skipped["later turns need the corpus (--corpus) to rebuild observations"] += 1
            break
        history.append(("assistant", text))
        action = episode.on_output(text, turn, {}, 0.0)
        if isinstance(action, ToolJob):
            action = episode.on_tool_result(action.run())
        if isinstance(action, Done):
            break
        turn = action
        history.extend(turn.messages)
    if record.source == "silver" and filters.silver_variants > 1 and out and out[0].search_number == 1:
        out += _silver_variants(record, out[0], filters.silver_variants - 1)
    return out


def _silver_variants(record: TrajectoryRecord, first: QueryPair, extra: int) -> list[QueryPair]:
    """More first-turn targets for a silver episode: the other mined queries that found a gold page."""
    mined = record.raw.get("silver") if isinstance(record.raw.get("silver"), dict) else {}
    variants = []
    for item in (mined.get("queries") or [])[1:extra + 1]:
        if isinstance(item, dict) and isinstance(item.get("query"), str) and item.get("gold_rank"):
            variants.append(QueryPair(first.question_id, first.documents, first.source, first.annotator, 1, 1,
                                      list(first.messages), search_target(item["query"]), item["query"],
                                      int(item["gold_rank"])))
    return variants


def split_pairs(pairs: list[QueryPair], heldout_documents: set[str]) -> tuple[list[QueryPair], list[QueryPair]]:
    """(training, held-out) pairs: a pair is held out when any of its gold documents is."""
    train = [p for p in pairs if not heldout_documents.intersection(p.documents)]
    held = [p for p in pairs if heldout_documents.intersection(p.documents)]
    return train, held

