"""MuDABench's workflow agent: plan by document metadata, one extraction episode per document, normalised records, sandboxed code.

`WorkflowEpisode` is imported on first use, so importing `engine.agents.workflow.settings` (which
`dossier --help` does) does not load the corpus tools.
"""

__all__ = ["WorkflowEpisode"]


def __getattr__(name: str):
    if name == "WorkflowEpisode":
        from engine.agents.workflow.episode import WorkflowEpisode

        return WorkflowEpisode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
