"""Q-Guide (question-guided evidence acquisition): perception rounds, a confidence gate, chunk adjudication."""

from engine.agents.qguide.agent import build
from engine.agents.qguide.chunked import ChunkedEpisode
from engine.agents.qguide.loop import Loop, Result

__all__ = ["build", "ChunkedEpisode", "Loop", "Result"]
