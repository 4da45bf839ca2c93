"""Report-level analyses by registration: a `Section` reads every scored item (and the trajectories) at once.

A section's function takes the evaluation's `SectionInputs` and returns the JSON-ready dict the report
stores under the section's name, or None when it has nothing to say. A section registered with
`declared=True` runs only for runs whose agent lists it in its spec's `analyses`
(engine/agents/registry.py: `AgentSpec(..., analyses=("guessability",))`), so evaluation branches on
what an agent declares, never on its name; an undeclared section runs on every run and returns None
when the run holds none of the records it reads. Adding an analysis is one file plus one line in
`_REGISTERED`; its report key is its name. Undeclared sections come in the report after the MuDABench
figures, declared ones last (the order reports have always had).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Section", "SectionInputs", "registered_sections", "declared_analyses"]


@dataclass(frozen=True, slots=True)
class SectionInputs:
    """What a section reads: the matched gold items with their predictions and scores, and the episodes."""

    pairs: list  # (Question, Prediction | None) per gold item, in gold order
    items: list  # ItemResult per gold item, in the same order
    episodes: dict | None  # gold id -> trajectory Episode; None when the run has no trajectories
    level: float  # confidence level of every interval


@dataclass(frozen=True, slots=True)
class Section:
    name: str  # the report's key for this analysis
    compute: str  # "module:function(SectionInputs) -> dict | None"
    declared: bool = False  # True: only for runs whose agent's spec lists `name` in its analyses

    def __post_init__(self) -> None:
        if ":" not in self.compute:
            raise ValueError(f"section {self.name!r}: {self.compute!r} must read 'module:function'")

    def run(self, inputs: SectionInputs) -> dict | None:
        return _load(self.compute)(inputs)


def _load(path: str) -> Callable:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


_REGISTERED = (
    Section("workflow_stages", "engine.eval.analyses.workflow_stages:section"),  # MuDABench's per-stage taxonomy
    Section("qguide", "engine.eval.analyses.qguide:section"),  # Q-Guide's gate, reliability and budget curve
    Section("guessability", "engine.eval.analyses.guessability:section", declared=True),  # MADQA Appendix E.2
)

_SECTIONS = {section.name: section for section in _REGISTERED}


def registered_sections() -> tuple[Section, ...]:
    """Every registered report section, in registration order (the order of the report's keys)."""
    return tuple(_SECTIONS.values())


def declared_analyses(agent: str | None) -> tuple[str, ...]:
    """The analyses the run's agent declares on its spec; () for no agent or one this checkout does not register."""
    from engine.agents.registry import agent_names, agent_spec

    return agent_spec(agent).analyses if agent in agent_names() else ()
