"""What an agent episode asks the rollout runner to do next, and the interface every agent implements.

An episode is a small state machine over shared tools; the runner (`engine/agents/runner.py`)
drives many of them at once through one model backend. After each event the episode returns
one action:

    Turn      append these messages to the episode's conversation, then one model call
              (constrained to the turn's JSON schema when it gives one)
    ToolJob   run this callable in the tool thread pool (several tools at once: do them inside it)
    Spawn     run these child episodes (each its own conversation, all in flight together),
              then hand them back finished through `on_children`; with `fork`, each child's
              conversation starts as a copy of the parent's (Q-Guide's budget branches); with
              `on_child_done`, the parent hears of each child as it ends and may add children
              to the same spawn (the workflow structures a document while others are read)
    Done      the episode is over; the runner writes its trajectory and prediction

Events: `first_turn()` once; `on_output(raw, turn, tokens, model_s)` after each model call;
`on_tool_result(value)` after a ToolJob; `on_children(children)` after a Spawn. `force_answer(note)`
(the context is nearly full) and `fail(reason)` end episodes early. `prediction()` and
`trajectory()` give the records; `iterations` counts model calls (it seeds sampling).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from engine.datasets.formats import Prediction, Question

__all__ = ["Action", "AgentEpisode", "Done", "Spawn", "ToolJob", "Turn"]


@dataclass(slots=True)
class Turn:
    """Messages to append, then one model call."""

    messages: list[tuple[str, Any]]  # (role, content): text, or text and image parts for vision models
    allow_search: bool  # False: the model must answer (the BM25 agent's schema admits only the answer tool)
    schema: dict | None = None  # the JSON schema this turn's output must match; None: the backend's tool-call schema
    max_new_tokens: int | None = None  # tokens this turn may generate; None: the run's setting
    temperature: float | None = None  # this call's sampling temperature (seeded per turn); None: the run's setting


@dataclass(slots=True)
class ToolJob:
    """A tool call to run off the main loop; `run()` returns the value for `on_tool_result`."""

    run: Callable[[], object]


@dataclass(slots=True)
class Spawn:
    """Child episodes to run to completion (concurrently) before `on_children` is called with them.

    `on_child_done(child)` is called as each child ends, while the others still run; the episodes it
    returns join this spawn at once (same `fork` rule), and `on_children` receives every child, the
    spawned ones first, then the added ones in the order they were added, once the last has ended.
    """

    children: list[AgentEpisode]
    fork: bool = False  # True: each child starts as a copy of the parent's conversation so far (KV shared)
    on_child_done: Callable[[AgentEpisode], list[AgentEpisode]] | None = None  # None: wait for all children


@dataclass(slots=True)
class Done:
    reason: str  # answered | max_iterations | malformed | context_exhausted | error | an agent's own reason


Action = Turn | ToolJob | Spawn | Done


class AgentEpisode(Protocol):
    """The interface the runner drives (see the module docstring)."""

    question: Question

    @property
    def iterations(self) -> int: ...

    def first_turn(self) -> Action: ...

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float) -> Action: ...

    def on_tool_result(self, result: object) -> Action: ...

    def on_children(self, children: list[AgentEpisode]) -> Action: ...

    def force_answer(self, note: str) -> Turn: ...

    def fail(self, reason: str) -> Done: ...

    def prediction(self) -> Prediction: ...

    def trajectory(self) -> dict: ...
