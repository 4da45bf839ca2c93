"""Every agent `dossier run --agent NAME` can run, registered in one table.

An agent is an episode state machine (see `engine/agents/actions.py`) built per question by a
factory `factory(question, settings, env)`. Adding an agent is one new file holding its episode
class (and, when it has options, its settings dataclass: engine/agents/settings.py) plus one line
in `_REGISTERED` below; `dossier run` gets its options from that class, and the runner, the engine backend, the run directory
and `dossier eval` serve it unchanged. Factories are imported on first use, so listing agents
(e.g. in `--help`) costs nothing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from tools.errors import DossierError

__all__ = ["AgentSpec", "agent_names", "agent_spec", "registered"]


@dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str  # the value of --agent
    summary: str  # one line for --help and `dossier version`
    factory: str  # "module:callable" building one episode: callable(question, settings, env)
    needs_corpus: bool = True  # False: runs without --corpus (the env is None)
    run_meta: str | None = None  # "module:callable() -> dict": fields this agent adds to run.json
    run_report: str | None = None  # "module:callable(out, engine) -> dict": fields it adds to run_summary.json
    settings: str | None = None  # "module:Class": this agent's own settings dataclass (engine/agents/settings.py)
    analyses: tuple[str, ...] = ()  # report sections only this agent's runs get (engine/eval/sections.py)

    def build(self, question, settings, env):
        """One episode of this agent for `question`."""
        return _load(self.factory)(question, settings, env)

    def settings_class(self):
        """This agent's own settings dataclass, or None when it has none beyond RunSettings."""
        return _load(self.settings) if self.settings else None

    def meta(self) -> dict:
        return _load(self.run_meta)() if self.run_meta else {}

    def report(self, out, engine) -> dict:
        return _load(self.run_report)(out, engine) if self.run_report else {}


def _load(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


_REGISTERED = (
    AgentSpec("bm25", "MADQA's BM25 agent: search or answer each turn, answer forced on turn T",
              "engine.agents.bm25:Episode", settings="engine.agents.bm25:Bm25Settings"),
    AgentSpec("rag", "one retrieval with the question as free text, then a forced answer",
              "engine.agents.baselines:RagEpisode"),
    AgentSpec("oracle", "the gold evidence pages given directly, then a forced answer (no retrieval)",
              "engine.agents.baselines:OracleEpisode"),
    AgentSpec("closed-book", "the question alone, then a forced answer (guessability)",
              "engine.agents.baselines:ClosedBookEpisode", needs_corpus=False, analyses=("guessability",)),
    AgentSpec("workflow", "MuDABench's workflow: plan by document metadata, one extraction episode per document, "
              "typed records, a program run in the sandbox, a final answer", "engine.agents.workflow.episode:WorkflowEpisode",
              run_meta="tools.sandbox.guarantees:run_meta", run_report="engine.agents.workflow.report:run_report",
              settings="engine.agents.workflow.settings:WorkflowSettings"),
    AgentSpec("qguide", "Q-Guide: rounds of parallel perception-tool calls, a confidence gate with verification, "
              "long documents in adjudicated chunks", "engine.agents.qguide.agent:build",
              settings="engine.agents.qguide.settings:QGuideSettings"),
    AgentSpec("direct", "direct prompting (Q-Guide's baselines): one turn over the document's page images, text or "
              "both (--inputs), Q-Guide's answer schema, no tools", "engine.agents.direct:DirectEpisode",
              settings="engine.agents.qguide.settings:DirectSettings"),
    AgentSpec("filesearch", "file search (offline managed RAG): pages chunked, MiniLM embeddings, the nearest chunks "
              "shown, one answer turn", "engine.agents.filesearch:FileSearchEpisode",
              settings="engine.agents.filesearch:FileSearchSettings"),
    AgentSpec("rlm", "Recursive Language Model: the corpus in a sandboxed Python REPL, code turns with llm_query "
              "sub-calls, then the answer extracted", "engine.agents.rlm:RlmEpisode",
              run_meta="tools.sandbox.guarantees:run_meta", settings="engine.agents.rlm:RlmSettings"),
)

_AGENTS = {spec.name: spec for spec in _REGISTERED}


def registered() -> tuple[AgentSpec, ...]:
    """Every registered agent's spec, in registration order."""
    return tuple(_AGENTS.values())


def agent_names() -> tuple[str, ...]:
    """Every registered agent name, in registration order."""
    return tuple(_AGENTS)


def agent_spec(name: str) -> AgentSpec:
    """The spec of agent `name`; a DossierError listing the choices when there is none."""
    if name not in _AGENTS:
        raise DossierError(f"unknown agent {name!r}; choose one of {', '.join(_AGENTS)}")
    return _AGENTS[name]
