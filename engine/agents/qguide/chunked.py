"""A long named document: one Q-Guide loop per overlapping chunk, then adjudication (Section 3.3, Eq. 4).

The chunks run as child episodes (each its own conversation, all in flight together). Their
final answers are combined by confidence-weighted majority (`longdoc.adjudicate`); a tie goes
to one arbitration call in this episode's own conversation, which sees the question, the
competing answers with their confidences, and the observations each chunk gathered, and
picks one ({"choice": n}). An unusable arbitration reply keeps the first tied answer in page
order, and says so. With a budget sweep every budget is adjudicated the same way, from the
chunks' answers at that budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from engine.agents.actions import Done, Spawn, Turn
from engine.agents.protocol import Malformed
from engine.agents.qguide import prompts
from engine.agents.qguide.config import Setup
from engine.agents.qguide.evidence import format_observation
from engine.agents.qguide.gate import UNKNOWN
from engine.agents.qguide.longdoc import ChunkAnswer, adjudicate
from engine.agents.qguide.loop import Loop, Result, build_prediction, build_trajectory, cost_summary, finish_reason
from engine.agents.qguide.protocol import choice_schema, parse_choice
from engine.datasets.formats import Question

__all__ = ["ChunkedEpisode"]

EVIDENCE_CHARS = 600  # per observation shown to the arbiter


@dataclass
class ChunkedEpisode:
    question: Question
    settings: object
    env: object
    setup: Setup
    ranges: list[tuple[int, int]]  # inclusive page ranges of the chunks
    chunks: list[Loop] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    budget: dict = field(default_factory=dict)  # T_max -> Result (adjudicated)
    adjudication: dict = field(default_factory=dict)  # T_max -> {"votes", "winner", "tied", "arbitration"}
    result: Result | None = None
    reason: str | None = None
    calls: int = 0
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    _ties: list = field(default_factory=list)  # budgets still to arbitrate: (budget, tied chunk indices)
    _delta: str = ""

    @property
    def iterations(self) -> int:
        return self.calls

    def first_turn(self) -> Spawn:
        s = self.settings
        self.chunks = [Loop(replace(self.question, id=f"{self.question.id}#chunk{j}"), s, self.env, self.setup,
                            list(range(first, last + 1)), s.max_rounds)
                       for j, (first, last) in enumerate(self.ranges, start=1)]
        return Spawn(list(self.chunks))

    def on_children(self, children):
        for j, chunk in enumerate(self.chunks, start=1):
            for step in chunk.steps:
                self.steps.append({**step, "chunk": j})
        for budget in self.setup.budgets:
            results = [chunk.budget.get(budget, chunk.result) for chunk in self.chunks]
            outcome = adjudicate([ChunkAnswer(r.answer, r.submission.confidence if r.submission and
                                              r.decision != "rewritten" else None) for r in results])
            self.adjudication[budget] = outcome.to_json()
            if outcome.winner is not None:
                self.budget[budget] = results[outcome.winner]
            elif outcome.tied:
                self._ties.append((budget, outcome.tied))
            else:  # every chunk abstained
                self.budget[budget] = Result([UNKNOWN], None, "rewritten", max(r.turn for r in results),
                                             "every chunk abstained", max(r.rounds for r in results))
        return self._next_tie()

    def _next_tie(self):
        if not self._ties:
            return self._finish()
        budget, tied = self._ties[0]
        candidates = []
        for index in tied:
            result = self.chunks[index].budget.get(budget, self.chunks[index].result)
            evidence = "".join(part for obs_index, obs in enumerate(self.chunks[index].observations, start=1)
                               for part in format_observation(obs_index, obs, False, EVIDENCE_CHARS)
                               if isinstance(part, str))
            candidates.append((result.answer, result.submission.confidence, evidence))
        message = prompts.arbitration_prompt(self.question.question, candidates)
        self._delta = f"<user> {message}"
        schema = choice_schema(len(tied)) if self.settings.structured else None
        return Turn([("user", message)], allow_search=False, schema=schema, max_new_tokens=16)

    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        self.calls += 1
        budget, tied = self._ties.pop(0)
        choice = parse_choice(raw, len(tied))
        if isinstance(choice, Malformed):
            winner, note = tied[0], f"unusable arbitration reply ({choice.reason}): the first tied answer kept"
        else:
            winner, note = tied[choice - 1], f"arbitration chose candidate {choice}"
        self.budget[budget] = self.chunks[winner].budget.get(budget, self.chunks[winner].result)
        self.adjudication[budget].update(winner=winner, arbitration=note)
        self.steps.append({"step": 0, "role": "arbitrate", "budget": budget, "input_delta": self._delta,
                           "raw_output": raw, "tool_call": {"name": "arbitrate", "arguments": {"candidates": tied}},
                           "tool_result": {"winner": winner, "note": note},
                           "tokens": {k: v for k, v in tokens.items() if k != "appended"},
                           "context": {"pages": 0, "observations": 0, "turn": int(sum(tokens.get("appended") or []))},
                           "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}})
        return self._next_tie()

    def _finish(self) -> Done:
        self.result = self.budget[max(self.setup.budgets)]
        self.wall_s = time.perf_counter() - self.started
        self.reason = finish_reason(self.result.decision)
        return Done(self.reason)

    def on_tool_result(self, result):
        raise AssertionError("the chunked episode runs no tools itself")

    def force_answer(self, note: str) -> Turn:
        return self._next_tie()  # the arbitration turn is all it appends; the runner fails it if even that is too long

    def fail(self, reason: str) -> Done:
        if self._ties:  # arbitration could not run: the first tied answer stands
            budget, tied = self._ties.pop(0)
            self.budget[budget] = self.chunks[tied[0]].budget.get(budget, self.chunks[tied[0]].result)
            self.adjudication[budget].update(winner=tied[0], arbitration=f"arbitration failed ({reason})")
            while self._ties:
                budget, tied = self._ties.pop(0)
                self.budget[budget] = self.chunks[tied[0]].budget.get(budget, self.chunks[tied[0]].result)
            return self._finish()
        self.result, self.reason = Result([UNKNOWN], None, "failed", 0, reason), reason
        return Done(reason)

    def _summary(self) -> dict:
        calls: dict[str, int] = {}
        for chunk in self.chunks:
            for name, count in chunk.summary()["tool_calls"].items():
                calls[name] = calls.get(name, 0) + count
        return {"mode": "chunked", "document": self.setup.document, "pages": [p for c in self.chunks for p in c.pages],
                "max_rounds": self.settings.max_rounds, "at_limit": self.setup.at_limit, "t_max_counts": "turns",
                "page_text": "withheld" if self.setup.withhold_page_text else "shown", "gate": self.setup.gate,
                "tools": self.setup.tools,
                "turns": sum(c.turns for c in self.chunks), "rounds": sum(c.rounds for c in self.chunks),
                "observations": sum(len(c.observations) for c in self.chunks),
                "tool_calls": calls, **(self.result.to_json() if self.result else {}),
                "budget": {str(k): v.to_json() for k, v in sorted(self.budget.items())},
                "chunks": [{"pages": [c.pages[0], c.pages[-1]], **(c.result.to_json() if c.result else {})}
                           for c in self.chunks],
                "adjudication": {str(k): v for k, v in sorted(self.adjudication.items())},
                "cost": cost_summary(self.steps, sum(len(c.pages) for c in self.chunks), sum(c.turns for c in self.chunks))}

    def prediction(self):
        searches = [q for c in self.chunks for q in c.search_history]
        return build_prediction(self.question, self.result, self.steps, searches, sum(c.turns for c in self.chunks),
                                self.reason, self.wall_s)

    def trajectory(self) -> dict:
        return build_trajectory(self.question, self.result, self.steps, self.reason, self._summary())

