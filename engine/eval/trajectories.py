"""Reading `trajectories.jsonl` (CONTRIBUTING.md, "Run directories and trajectories").

Only what evaluation needs is kept per step: the tool name, a search's query and returned
pages, an answer call's answer and citations, and the document of a step made by a per-document
child episode (the workflow agent's extractions carry `"document"`). Malformed steps
(`"tool_call": null`) stay in the episode as steps without a tool. Human trajectories use the
same schema.

Two declared fields let any agent report effort that is not one of its model calls' tool calls:
- a step's `"retrieved": {"query": "...", "pages": [{"document", "page"}, ...]}` is a retrieval
  call the agent ran itself, before that step's model call (no model chose it: the rag and
  filesearch baselines retrieve with the question). It is read as a `search` step of its own,
  placed before the step, so it counts as a search in every analysis (searches per question,
  accuracy at a search budget, first-search hits) like a model's search call; a failed one
  (no "pages", e.g. with an "error") is a search that returned nothing. A step without it
  adds nothing. Those baselines wrote the field from the start, so their older runs are read
  this way too (before, their retrieval counted only in the prediction's search history).
- the episode's `"child_tokens": {"prefilled", "cached", "generated"}` are the tokens of model
  calls made by its child episodes (the rlm agent's llm_query sub-calls) that neither its steps
  nor its prediction's "tokens" include; the token effort measures add them
  (engine/eval/analyses/effort.py). Absent (runs written before the field existed, agents with
  no such children): the prediction's "tokens" alone, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.datasets.formats import Evidence, LineError, iter_jsonl, parse_page
from tools.errors import DossierError

__all__ = ["Step", "Episode", "load_trajectories", "parse_episode"]


@dataclass(slots=True, frozen=True)
class Step:
    """One model call of an episode, or a retrieval the agent ran before one (a step's "retrieved"),
    reduced to what evaluation reads."""

    tool: str | None  # "search", "answer", another tool's name, or None for a malformed call
    query: str | None = None  # a search's query
    pages: tuple[Evidence, ...] = ()  # pages a search returned
    answer: str | list[str] | None = None  # an answer call's answer
    citations: tuple[Evidence, ...] = ()  # an answer call's citations
    document: str | None = None  # set on a per-document child's step: its answer answers a sub-question


@dataclass(slots=True)
class Episode:
    """One question's trajectory."""

    id: str | None
    question: str
    steps: list[Step] = field(default_factory=list)
    final_answer: str | list[str] | None = None
    extra: dict = field(default_factory=dict)  # an agent's own top-level fields (e.g. "qguide"), kept verbatim
    child_tokens: dict | None = None  # "child_tokens" as written (its numbers checked where read); None when absent

    @property
    def searches(self) -> list[Step]:
        return [s for s in self.steps if s.tool == "search"]


def _pages(value: object, where: str) -> tuple[Evidence, ...]:
    if not isinstance(value, list):
        return ()
    pages = []
    for item in value:
        if isinstance(item, dict) and "document" in item and "page" in item:
            try:
                pages.append(Evidence(str(item["document"]), parse_page(item["page"], where)))
            except DossierError:
                continue  # a page the tool reported oddly is not evidence either way
    return tuple(pages)


def _answer(value: object) -> str | list[str] | None:
    if value is None:
        return None
    if isinstance(value, list):
        return [str(v) for v in value]
    return str(value)


def parse_episode(obj: object, where: str) -> Episode:
    """Build an Episode from one parsed JSON line.

    Raises:
        DossierError: the line is not an object with "steps" (a list) and an "id" or "question", or its
            "child_tokens" is not an object.
    """
    if not isinstance(obj, dict):
        raise DossierError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "id" not in obj and "question" not in obj:
        raise DossierError(f"{where}: a trajectory needs 'id' or 'question'")
    child_tokens = obj.get("child_tokens")
    if child_tokens is not None and not isinstance(child_tokens, dict):
        raise DossierError(f"{where}: 'child_tokens' must be an object of token counts, got {child_tokens!r}")
    raw_steps = obj.get("steps")
    if not isinstance(raw_steps, list):
        raise DossierError(f"{where}: 'steps' must be a list of steps")
    steps = []
    for raw in raw_steps:
        call = raw.get("tool_call") if isinstance(raw, dict) else None
        document = raw.get("document") if isinstance(raw, dict) and isinstance(raw.get("document"), str) else None
        retrieved = raw.get("retrieved") if isinstance(raw, dict) else None
        if isinstance(retrieved, dict):  # the agent's own retrieval, before this model call: a search step
            query = retrieved.get("query")
            steps.append(Step("search", query=None if query is None else str(query),
                              pages=_pages(retrieved.get("pages"), where), document=document))
        if not isinstance(call, dict) or not call.get("name"):
            steps.append(Step(None, document=document))
            continue
        name = str(call["name"])
        args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
        result = raw.get("tool_result") if isinstance(raw.get("tool_result"), dict) else {}
        if name == "search":
            query = args.get("query")
            steps.append(Step(name, query=None if query is None else str(query), pages=_pages(result.get("pages"), where),
                              document=document))
        elif name == "answer":
            steps.append(Step(name, answer=_answer(args.get("answer")), citations=_pages(args.get("citations"), where),
                              document=document))
        else:
            steps.append(Step(name, document=document))
    final = obj.get("final") if isinstance(obj.get("final"), dict) else {}
    episode_id = obj.get("id")
    extra = {k: v for k, v in obj.items() if k not in ("id", "question", "agent", "steps", "final", "child_tokens")}
    return Episode(None if episode_id is None else str(episode_id), str(obj.get("question", "")), steps,
                   _answer(final.get("answer")), extra, child_tokens)


def load_trajectories(path: str | Path) -> tuple[list[Episode], list[LineError]]:
    """Read a trajectories file; malformed lines come back as errors, never silently dropped."""
    errors: list[LineError] = []
    episodes = []
    for number, obj in iter_jsonl(path, errors):
        try:
            episodes.append(parse_episode(obj, f"{path}:{number}"))
        except DossierError as err:
            errors.append(LineError(str(path), number, str(err).split(": ", 1)[-1]))
    return episodes, errors
