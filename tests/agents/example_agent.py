"""A tiny agent, the whole of it: it searches the question as free text and cites the top page.

Registered with one line (tests/agents/test_example_agent.py does it for the test):
    AgentSpec("first-hit", "cites the first search hit", "tests.agents.example_agent:FirstHitEpisode",
              settings="tests.agents.example_agent:FirstHitSettings")
Its one option, --hit-rank, appears in `dossier run --help` under "--agent first-hit".
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.agents.actions import Done, ToolJob
from engine.agents.bm25 import Episode
from engine.agents.protocol import AnswerCall
from engine.agents.settings_fields import setting
from engine.datasets.formats import Evidence
from tools.errors import DossierError

__all__ = ["FirstHitEpisode", "FirstHitSettings"]


@dataclass(slots=True)
class FirstHitSettings:
    hit_rank: int = setting(1, "first-hit: which hit of the one search to cite (1 = the top one).")

    @staticmethod
    def check(settings) -> None:
        if settings.hit_rank < 1:
            raise DossierError(f"--hit-rank must be at least 1 (got {settings.hit_rank})")


class FirstHitEpisode(Episode):
    """No model call: one search, then an answer citing the first hit."""

    def first_turn(self) -> ToolJob:
        return ToolJob(lambda: self.env.search(self.question.question, self.settings.hit_rank, mode="bag"))

    def on_tool_result(self, result) -> Done:
        hits, _error = result
        pages = [{"document": h.document, "page": h.page} for h in hits]
        self.search_history.append(self.question.question)
        self.steps.append({"step": 1, "input_delta": "", "raw_output": "", "tokens": {}, "tool_result": {"pages": pages},
                           "tool_call": {"name": "search", "arguments": {"query": self.question.question}}})
        self.answer = AnswerCall(["see the cited page"], [Evidence(h.document, h.page) for h in hits[self.settings.hit_rank - 1:][:1]])
        return self._finish("answered")
