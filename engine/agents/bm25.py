"""MADQA's BM25 agent as an episode state machine, independent of how the model runs.

The runner drives it: `first_turn()` gives the messages to append before the first model
call; each model output goes to `on_output()`, which returns the next action — a tool
job to run in the thread pool, a turn to generate directly (e.g. after a malformed
call), or done. A tool job's result goes to `on_tool_result()`, which returns the next
turn or done. The episode records every step for trajectories.jsonl and builds the
canonical prediction.

Each turn the model searches or answers, and it must answer on turn T. With loop="guided" a
repeated query is answered with what it returned before and a search that found nothing with
its words' page counts and a shorter query that matches; loop="madqa" is MADQA's loop exactly.
The one-shot baselines (rag, oracle, closed-book) are small subclasses in `baselines.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.agents import prompts
from engine.agents.actions import Done, ToolJob, Turn
from engine.agents.protocol import AnswerCall, Malformed, SearchCall, parse_tool_call
from engine.agents.settings_fields import setting
from engine.datasets.formats import Prediction, Question
from tools.errors import DossierError

if TYPE_CHECKING:
    from engine.agents.env import AgentEnv
    from engine.agents.settings import AgentSettings

__all__ = ["Episode", "Bm25Settings", "NO_ANSWER", "LOOPS"]

NO_ANSWER = "Maximum iterations reached without answer"
LOOPS = ("madqa", "guided")
CUT_BY_CAP = ("Your reply was cut off after {cap} tokens, before its tool call was complete, so nothing was run. "
              "Reply with the JSON tool call first and keep it short (no reasoning before it).")


@dataclass(slots=True)
class Bm25Settings:
    """The search agent's own settings (`dossier run --agent bm25`)."""

    loop: str = setting("madqa", "The search agent's loop: guided (a repeated query is answered with what it "
                                 "returned before; a search that finds nothing names the words no page holds and a "
                                 "shorter query that matches) or madqa (MADQA's loop exactly).")

    @staticmethod
    def check(settings) -> None:
        if settings.loop not in LOOPS:
            raise DossierError(f"loop must be one of {', '.join(LOOPS)} (got {settings.loop!r})")


@dataclass(slots=True)
class _Pending:
    """The step being built: filled by on_output, completed by on_tool_result."""

    record: dict
    call: SearchCall | AnswerCall | Malformed


@dataclass
class Episode:
    question: Question
    settings: AgentSettings
    env: AgentEnv | None  # None only for closed-book
    steps: list[dict] = field(default_factory=list)
    search_history: list[str] = field(default_factory=list)
    answer: AnswerCall | None = None
    reason: str | None = None
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    _pending: _Pending | None = None
    _input_delta: str = ""
    # guided loop: normalised query -> (step, pages it returned, error), to answer a repeat without re-running it
    _searched: dict[str, tuple[int, list[tuple[str, int]], str | None]] = field(default_factory=dict)

    retries_malformed = True  # a malformed call is answered with its error and the episode goes on (not a field)

    def _note_first_step(self, record: dict) -> None:
        """Add what this agent did before its first model call to that call's step record (nothing here)."""

    # --- turns -----------------------------------------------------------------------
    @property
    def iterations(self) -> int:
        return len(self.steps)

    @property
    def turns_left(self) -> int:
        return self.settings.max_iterations - self.iterations

    def first_turn(self) -> Turn:
        """System prompt and question."""
        s, q = self.settings, self.question
        system = s.system_prompt or (prompts.for_images(prompts.SEARCH_AGENT_SYSTEM) if self.images
                                     else prompts.SEARCH_AGENT_SYSTEM)
        system = system.replace("{k}", str(s.k))
        user = prompts.format_question(q.question) + prompts.turn_footer(s.max_iterations)
        return self._turn([("system", system), ("user", user)], allow_search=s.max_iterations > 1)

    @property
    def images(self) -> bool:
        """Pages are shown as rendered images (a vision model), not as text."""
        return self.settings.observe == "image"

    def _image(self, document: str, page: int):
        return self.env.page_image(document, page, self.settings.image_dpi, self.settings.image_max_pixels)

    def _turn(self, messages: list[tuple[str, object]], allow_search: bool) -> Turn:
        self._input_delta = "\n\n".join(f"<{role}> {_as_text(content)}" for role, content in messages)
        return Turn(messages, allow_search)

    def _observation(self, content, stop: bool = False) -> Turn:
        """The next turn after a tool result or an error: observation (text or parts) + turns-left footer.
        With `stop` (the stop rule fired) the turn must answer."""
        allow = self.turns_left > 1 and not stop
        footer = f"\n\n{prompts.STOP_RULE}" if stop else prompts.turn_footer(self.turns_left)
        content = content + footer if isinstance(content, str) else [*content, footer.lstrip("\n")]
        return self._turn([(self.settings.message_role, content)], allow)

    def force_answer(self, note: str) -> Turn:
        """A short turn demanding the answer now (used when the context is nearly full)."""
        return self._turn([(self.settings.message_role, note)], allow_search=False)

    # --- model output -------------------------------------------------------------------
    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float) -> ToolJob | Turn | Done:
        """Take one model turn; decide the next action."""
        call = parse_tool_call(raw, turn.allow_search)
        record = {"step": self.iterations + 1, "input_delta": self._input_delta, "raw_output": raw,
                  "tool_call": None if isinstance(call, Malformed) else call.to_json(), "tool_result": None,
                  "tokens": tokens, "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}}
        self._note_first_step(record)
        self.steps.append(record)
        if isinstance(call, AnswerCall):
            if call.truncated:
                record["repaired"] = "cut off by the token limit inside the citations; the complete ones were kept"
            self.answer = call
            return self._finish("answered")
        if isinstance(call, Malformed):
            record["tool_result"] = {"error": call.reason}
            if tokens.get("cut_by_turn_cap"):  # the cap ended the turn inside the call: say so, not "invalid JSON"
                cap = turn.max_new_tokens or self.settings.max_new_tokens
                record["tool_result"] = {"error": f"cut off by the turn cap ({cap} tokens) before the call was "
                                                  f"complete; it was not run", "cut_by_turn_cap": cap}
                if not self.retries_malformed:
                    return self._finish("malformed")
                if self.turns_left <= 0:
                    return self._finish("max_iterations")
                return self._observation(CUT_BY_CAP.format(cap=cap))
            if not self.retries_malformed:
                return self._finish("malformed")
            if self.turns_left <= 0:
                return self._finish("max_iterations")
            return self._observation(prompts.MALFORMED.format(reason=call.reason))
        self.search_history.append(call.query)
        guided = self.settings.loop == "guided"
        if guided and _normalised(call.query) in self._searched:
            return self._repeated(record, call.query)
        self._pending = _Pending(record, call)
        env, s = self.env, self.settings

        def search():  # in the tool thread: the search, page images for vision models, the retry hint
            hits, error = env.search(call.query, s.k)
            if self.images:
                hits = env.with_images(hits, s.image_dpi, s.image_max_pixels)
            hint = env.retry_hint(call.query) if guided and not hits and error is None else None
            return hits, error, hint

        return ToolJob(lambda: _timed(search))

    def _repeated(self, record: dict, query: str) -> Turn | Done:
        """Guided loop: a query searched before is not run again; the observation says what it returned."""
        step, pages, error = self._searched[_normalised(query)]
        record["tool_result"] = ({"error": error} if error is not None else
                                 {"pages": [{"document": d, "page": p} for d, p in pages]}) | {"repeat_of_step": step}
        if self.turns_left <= 0:
            return self._finish("max_iterations")
        return self._observation(prompts.repeated_search(query, step, pages, error))

    def on_tool_result(self, result) -> Turn | Done:
        """Record a search result and build the observation turn."""
        pending, self._pending = self._pending, None
        assert pending is not None, "a tool result arrived without a pending call"
        (hits, error, hint), seconds = result
        pending.record["timing"]["tool_s"] = round(seconds, 4)
        pages = [(h.document, h.page) for h in hits]
        self._searched.setdefault(_normalised(pending.call.query), (pending.record["step"], pages, error))
        if error is not None:
            pending.record["tool_result"] = {"error": error}
            text = f"Search failed: {error}"
        else:
            pending.record["tool_result"] = {"pages": [{"document": d, "page": p} for d, p in pages]}
            if not hits:
                text = prompts.retry_hint(hint.parts, hint.suggestion, hint.suggestion_pages) if hint else prompts.NO_HITS
            elif self.images:
                text = prompts.format_hit_images(pending.call.query, [(h.document, h.page, h.image) for h in hits])
            else:
                text = prompts.format_hits(pending.call.query, [(h.document, h.page, h.text) for h in hits])
        if self.turns_left <= 0:
            return self._finish("max_iterations")
        if self.settings.stop_rule and self.turns_left > 1 and self._stop_rule_fires(pending.record):
            return self._observation(text, stop=True)
        return self._observation(text)

    def _stop_rule_fires(self, record: dict) -> bool:
        """Ask the learned stop rule (engine/agents/stop_rule.py) whether searching on would help; record its verdict."""
        from engine.agents.stop_rule import load_stop_rule

        fires, probability = load_stop_rule(self.settings.stop_rule).decide(self.steps, self.question.question,
                                                                            self.settings.max_iterations)
        record["stop_rule"] = {"probability": round(probability, 4), "fired": fires}
        return fires

    def on_children(self, children) -> Done:
        raise AssertionError("the BM25 agent and its baselines spawn no child episodes")

    def _finish(self, reason: str) -> Done:
        self.reason = reason
        self.wall_s = time.perf_counter() - self.started
        return Done(reason)

    def fail(self, reason: str) -> Done:
        """End the episode without an answer (context exhausted, engine error)."""
        return self._finish(reason)

    # --- records --------------------------------------------------------------------------
    def prediction(self) -> Prediction:
        totals = {"prefilled": 0, "cached": 0, "generated": 0}
        for step in self.steps:
            for key in totals:
                totals[key] += int(step["tokens"].get(key, 0))
        answer = self.answer.answer if self.answer else NO_ANSWER
        citations = self.answer.citations if self.answer else []
        extra = {"agent": self.settings.agent, "finish": self.reason, "tokens": totals, "wall_s": round(self.wall_s, 3),
                 "steps": len(self.steps)}
        return Prediction(self.question.id, self.question.question, answer, list(citations), list(self.search_history),
                          self.iterations, extra)

    def trajectory(self) -> dict:
        final = {"answer": self.answer.answer if self.answer else None,
                 "citations": [c.to_json() for c in self.answer.citations] if self.answer else [],
                 "reason": self.reason}
        return {"id": self.question.id, "question": self.question.question, "agent": self.settings.agent,
                "steps": self.steps, "final": final}


def _as_text(content) -> str:
    """A message's content for trajectories: images appear as <image WxH>."""
    if isinstance(content, str):
        return content
    return "".join(part if isinstance(part, str) else f"<image {part.size[0]}x{part.size[1]}>" for part in content)


def _normalised(query: str) -> str:
    """A query as the guided loop compares it: case and spacing do not make a search new."""
    return " ".join(query.lower().split())


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start
