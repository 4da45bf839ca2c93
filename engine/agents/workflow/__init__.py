"""MuDABench's workflow agent: plan by document metadata, one extraction episode per document, normalised records, sandboxed code."""

from engine.agents.workflow.episode import WorkflowEpisode

__all__ = ["WorkflowEpisode"]
