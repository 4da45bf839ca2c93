"""Q-Guide (question-guided evidence acquisition): perception rounds, a confidence gate, chunk adjudication.

The names below are imported on first use, so importing `engine.agents.qguide.settings` (which
`dossier --help` does) does not load the perception tools.
"""

__all__ = ["build", "ChunkedEpisode", "Loop", "Result"]


def __getattr__(name: str):
    if name == "build":
        from engine.agents.qguide.agent import build

        return build
    if name == "ChunkedEpisode":
        from engine.agents.qguide.chunked import ChunkedEpisode

        return ChunkedEpisode
    if name in ("Loop", "Result"):
        from engine.agents.qguide import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
