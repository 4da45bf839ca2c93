"""The Q-Guide perception loop for one question (or one chunk of a long document): an episode state machine.

State e_t = (question, pages in context, observations O_t). Each policy turn either calls
several tools at once (one evidence round: the calls run concurrently, each is one
observation) or submits an answer with a short reasoning and a confidence. T_max
(`max_rounds`) counts policy turns t = 1, 2, ... as Eq. 3 does ("submit_unknown if φ = 0 and
t ≥ T_max"; "multiple parallel tool calls in a single turn count as one turn"), so turn T_max is
the limit turn and T_max - 1 rounds of tool calls come before it: T_max = 1 is a single pass
with no tool call (Appendix F's "gain over a single pass": 40.0 % at T_max = 1, the paper's
direct prompting 38.8 %), T_max = 3 allows two rounds. The limit turn is resolved by Eq. 3:

    submit         the policy submits and passes the gate φ (σ ⪰ τ; below τ, one verification
                   turn checks the answer against O_t, and an unsupported answer is Unknown);
    submit_unknown the policy asks for more evidence (or writes no valid turn): the answer is
                   Unknown, no more tools run (`--at-limit unknown`, the paper's rule);

or, with `--at-limit force` (the forced-answer variant), the limit turn admits only `submit`
and ends with an instruction to submit; no valid submission there is Unknown ("no_submission").
A malformed free turn uses up a round (it is a turn the policy spent), so every loop ends.

The policy is never told its budget. With `--at-limit unknown` the limit turn is the same turn
(same messages, same schema) as the free turn a larger budget would take, so one run at the
largest budget answers every budget of `--max-rounds-sweep` exactly: budget b is what the
policy did on turn b, after b - 1 rounds (a submission, or submit_unknown when it asked for more).
With `--at-limit force` the limit turn differs (it is forced), so before the free turn after
turn b the loop spawns a branch: a fork of its conversation (KV shared through the prefix
cache) that takes exactly the forced turn a T_max = b run would take there, plus its gate.

Every model call is one step of the trajectory, tagged with its role (policy, forced, verify,
lookup), its round and, for a branch, its budget; `context` splits the tokens it appended into
pages, observations and turn text (Q-Guide's α·P + β·Σ|y| + γ·T).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from engine.agents.actions import Done, Spawn, ToolJob, Turn
from engine.agents.protocol import Malformed
from engine.agents.qguide import prompts
from engine.agents.qguide.config import Setup
from engine.agents.qguide.evidence import SEARCH, format_observation, observation_record, run_round
from engine.agents.qguide.gate import UNKNOWN, judge_verdict, passes_gate
from engine.agents.qguide.lookup_turn import LookupEpisode
from engine.agents.qguide.protocol import ROUND_TOKENS, PerceiveCall, SubmitCall, parse_turn, parse_verdict, verify_schema
from engine.datasets.formats import Prediction, Question
from tools.perception.lookup import LookupRequest

__all__ = ["Loop", "Result", "content_text", "cost_summary", "finish_reason"]


def content_text(content) -> str:
    """A message's content for trajectories: images appear as <image WxH>."""
    if isinstance(content, str):
        return content
    return "".join(part if isinstance(part, str) else f"<image {part.size[0]}x{part.size[1]}>" for part in content)


@dataclass(slots=True)
class Result:
    """How a loop (or a budget branch) ended."""

    answer: list[str]  # the final answer after the gate; ["Unknown"] for an abstention
    submission: SubmitCall | None  # what the policy submitted (None: no valid submission)
    decision: str  # passed | verified | rewritten | submit_unknown | no_submission | failed
    turn: int  # the policy turn that ended it
    note: str = ""  # why, for rewritten / submit_unknown / no_submission / failed
    rounds: int = 0  # evidence rounds (turns of tool calls) taken before it ended

    def to_json(self) -> dict:
        sub = self.submission
        return {"answer": self.answer, "decision": self.decision, "turn": self.turn, "rounds": self.rounds,
                "note": self.note, "submitted": None if sub is None else sub.answer,
                "confidence": None if sub is None else sub.confidence,
                "reasoning": None if sub is None else sub.reasoning,
                "citations": [] if sub is None or self.decision == "rewritten" else [c.to_json() for c in sub.citations]}


@dataclass
class Loop:
    """One perception loop; built by `engine.agents.qguide.agent.build` (see the module docstring).

    Args:
        pages: pages of the named document placed in context (none for collection questions).
        max_rounds: T_max of this loop: the limit turn (Eq. 3's t ≥ T_max), after T_max - 1 evidence rounds.
        forced_start: for a budget branch: the messages of the turn it forces (the parent's next turn).
        observations, turns, rounds, calls: a branch starts from its parent's.
    """

    question: Question
    settings: object
    env: object
    setup: Setup
    pages: list[int] = field(default_factory=list)
    max_rounds: int = 3
    forced_start: list | None = None
    observations: list = field(default_factory=list)
    turns: int = 0  # policy turns taken
    rounds: int = 0  # evidence rounds taken (free turns that called tools, or were malformed)
    calls: int = 0  # model calls made by this episode (it seeds sampling)
    branch: int | None = None  # the budget this loop answers, when it is a branch
    retrieval: dict | None = None  # --longdoc retrieve: the pages BM25 chose and their scores
    steps: list[dict] = field(default_factory=list)
    budget: dict = field(default_factory=dict)  # T_max -> Result (the sweep)
    result: Result | None = None
    reason: str | None = None
    search_history: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    _next: list = field(default_factory=list)  # (role, content, category) of the next policy turn
    _phase: str = "policy"  # policy | verify | done
    _forced: bool = False  # the current policy turn admits only submit
    _limit: bool = False  # the current policy turn is the limit turn (turn T_max, T_max - 1 rounds taken)
    _context_full: bool = False  # the runner had to force the answer: no room left to verify
    _categories: list = field(default_factory=list)  # category of each message of the turn in flight
    _delta: str = ""
    _pending: dict | None = None  # the step record of the round in flight
    _round: list | None = None  # the round's results while its lookups run
    _waiting: Turn | None = None  # the free turn waiting behind a branch
    _awaiting: str = ""  # "branch" or "lookups" while children run
    _submission: SubmitCall | None = None  # the submission being verified

    @property
    def iterations(self) -> int:
        return self.calls

    # --- turns ---------------------------------------------------------------------------------
    def first_turn(self):
        if self.forced_start is not None:
            self._next = self.forced_start
            return self._forced_turn()
        s, q = self.settings, self.question
        role = s.message_role
        self._next = [("system", s.system_prompt or prompts.system_prompt(self.setup.tools, self.setup.collection),
                       "turn")]
        if self.pages:
            doc = self.setup.document
            if self.setup.vision:
                parts: list = [prompts.pages_intro()]
                for page in self.pages:
                    image = self.env.page_image(doc, page, s.image_dpi, s.image_max_pixels)
                    parts += [f"File: {doc}, Page: {page}\n", image, "\n"]
                self._next.append((role, parts, "pages"))
            elif self.setup.withhold_page_text:  # the evidence must come from the tools (--page-text withheld)
                self._next.append((role, prompts.pages_withheld(doc, self.pages), "pages"))
            else:
                blocks = [f"File: {doc}, Page: {page}\n{self.env.page_text(doc, page, q.question).strip()}"
                          for page in self.pages]
                self._next.append((role, prompts.pages_intro() + "\n\n".join(blocks), "pages"))
            intro = prompts.document_intro(doc, self.pages[0], self.pages[-1], self.setup.page_count) + "\n"
        else:
            intro = ""
        self._next.append((role, f"{intro}Question: {q.question.strip()}", "turn"))
        return self._advance()

    def _advance(self):
        """The next policy turn: turn T_max is the limit turn; under `force`, a sweep budget's branch first."""
        at_limit = self.setup.at_limit
        turn = self.rounds + 1  # Eq. 3's t: a turn comes after each round of tool calls
        self._limit = turn >= self.max_rounds
        if self._limit and at_limit == "force":
            return self._forced_turn()
        free = self._turn(self._next, self.setup.round_schema, forced=False,
                          max_new_tokens=max(self.settings.max_new_tokens, ROUND_TOKENS))
        if (at_limit == "force" and self.branch is None and not self._limit and turn in self.setup.budgets):
            branch = Loop(self.question, self.settings, self.env, self.setup, list(self.pages), turn,
                          forced_start=list(self._next), observations=list(self.observations), turns=self.turns,
                          rounds=self.rounds, calls=self.calls, branch=turn)
            self._waiting, self._awaiting = free, "branch"
            return Spawn([branch], fork=True)
        return free

    def _forced_turn(self) -> Turn:
        messages = [*self._next, (self.settings.message_role, prompts.FORCED, "turn")]
        return self._turn(messages, self.setup.submit_schema, forced=True)

    def _turn(self, messages: list, schema: dict, forced: bool, max_new_tokens: int | None = None) -> Turn:
        self._categories = [category for _, _, category in messages]
        self._delta = "\n\n".join(f"<{role}> {content_text(content)}" for role, content, _ in messages)
        self._forced = forced
        return Turn([(role, content) for role, content, _ in messages], allow_search=not forced,
                    schema=schema if self.settings.structured else None, max_new_tokens=max_new_tokens)

    def force_answer(self, note: str) -> Turn:
        """The context is nearly full: submit now (and, below the gate, no room is left to verify)."""
        self._context_full, self._phase = True, "policy"
        return self._turn([(self.settings.message_role, note, "turn")], self.setup.submit_schema, forced=True)

    # --- model output --------------------------------------------------------------------------
    def on_output(self, raw: str, turn: Turn, tokens: dict, model_s: float):
        self.calls += 1
        record = self._record(raw, tokens, model_s)
        if self._phase == "verify":
            return self._on_verdict(raw, record)
        self.turns += 1
        record["round"] = self.turns
        call = parse_turn(raw, not self._forced, self.setup.tools, self.setup.page_counts)
        if isinstance(call, Malformed):
            record["tool_result"] = {"error": call.reason}
            if self._forced:
                return self._finish(Result([UNKNOWN], None, "no_submission", self.turns,
                                           f"no valid submission by the last turn ({call.reason})", self.rounds))
            if self._limit:
                return self._finish(self._submit_unknown(f"no valid turn at T_max = {self.max_rounds}, after "
                                                         f"{self.rounds} rounds ({call.reason})"))
            self._spend_round(f"no valid turn after {self.rounds} rounds ({call.reason})")
            self._next = [(self.settings.message_role, prompts.MALFORMED.format(reason=call.reason), "turn")]
            return self._advance()
        record["tool_call"] = call.to_json()
        if isinstance(call, PerceiveCall):
            if self._limit:  # Eq. 3: φ = 0 at t ≥ T_max
                record["tool_result"] = {"error": f"turn {self.rounds + 1} is T_max = {self.max_rounds}: no tools run"}
                return self._finish(self._submit_unknown(
                    f"the policy asked for more evidence at turn T_max = {self.max_rounds}, after {self.rounds} "
                    "rounds"))
            self._spend_round(f"the policy asked for more evidence after {self.rounds} rounds")
            self._pending = record
            self.search_history += [a.get("query", "") for n, a in call.calls if n == SEARCH]
            env, toolkit, s, setup = self.env, self.env.perception, self.settings, self.setup
            return ToolJob(lambda: run_round(call.calls, toolkit, env, setup.tools, s.k, setup.vision, s.image_dpi,
                                             s.image_max_pixels))
        return self._on_submit(call, record)

    def _submit_unknown(self, note: str) -> Result:
        return Result([UNKNOWN], None, "submit_unknown", self.turns, note, self.rounds)

    def _spend_round(self, note: str) -> None:
        """A free turn that did not submit: one more round. Under `unknown`, the sweep's budget equal to this
        turn's number ends here with submit_unknown (its limit turn is this very turn)."""
        turn = self.rounds + 1
        if self.setup.at_limit == "unknown" and self.branch is None and turn in self.setup.budgets:
            self.budget.setdefault(turn, self._submit_unknown(note))
        self.rounds += 1

    def _record(self, raw: str, tokens: dict, model_s: float) -> dict:
        appended = tokens.get("appended") or []
        context = {"pages": 0, "observations": 0, "turn": 0}
        for category, count in zip(self._categories, appended):
            context[category] += int(count)
        role = "verify" if self._phase == "verify" else ("forced" if self._forced else "policy")
        record = {"step": len(self.steps) + 1, "role": role, "input_delta": self._delta, "raw_output": raw,
                  "tool_call": None, "tool_result": None,
                  "tokens": {k: v for k, v in tokens.items() if k != "appended"}, "context": context,
                  "timing": {"model_s": round(model_s, 4), "tool_s": 0.0}}
        if self.branch is not None:
            record["branch"] = self.branch
        self.steps.append(record)
        return record

    def _on_submit(self, call: SubmitCall, record: dict):
        gate = self.setup.gate
        if passes_gate(call.confidence, gate):
            return self._finish(Result(call.answer, call, "passed", self.turns, "", self.rounds))
        if not self.observations:
            return self._finish(Result([UNKNOWN], call, "rewritten", self.turns,
                                       f"confidence {call.confidence} is below {gate} and no observation was recorded",
                                       self.rounds))
        if self._context_full:
            return self._finish(Result([UNKNOWN], call, "rewritten", self.turns,
                                       f"confidence {call.confidence} is below {gate} and the context has no room "
                                       "to verify",
                                       self.rounds))
        self._phase, self._submission = "verify", call
        message = prompts.verify_prompt(call.answer, call.confidence, gate, len(self.observations))
        return self._turn([(self.settings.message_role, message, "turn")], verify_schema(len(self.observations)),
                          forced=True, max_new_tokens=32)

    def _on_verdict(self, raw: str, record: dict):
        call = self._submission
        parsed = parse_verdict(raw)
        if isinstance(parsed, Malformed):
            record["tool_result"] = {"error": parsed.reason}
            return self._finish(Result([UNKNOWN], call, "rewritten", self.turns, f"unusable verdict: {parsed.reason}",
                                       self.rounds))
        verdict = judge_verdict(parsed[0], parsed[1], [o.ok for o in self.observations])
        record["tool_call"] = {"name": "verify", "arguments": {"supported": parsed[0], "observation": parsed[1]}}
        record["tool_result"] = {"supported": verdict.supported, "reason": verdict.reason}
        if verdict.supported:
            return self._finish(Result(call.answer, call, "verified", self.turns, verdict.reason, self.rounds))
        return self._finish(Result([UNKNOWN], call, "rewritten", self.turns, verdict.reason, self.rounds))

    # --- tools and children -------------------------------------------------------------------
    def on_tool_result(self, result):
        results, seconds = result
        self._pending["timing"]["tool_s"] = round(seconds, 4)
        lookups = list({id(r): r for r in results if isinstance(r, LookupRequest)}.values())  # a repeated call reads once
        if not lookups:
            return self._close_round(results)
        self._round, self._awaiting = results, "lookups"
        return Spawn([LookupEpisode(replace(self.question, id=f"{self.question.id}#lookup{len(self.steps)}.{i}"),
                                    request, self.setup.vision, self.settings.structured)
                      for i, request in enumerate(lookups, start=1)])

    def on_children(self, children):
        awaiting, self._awaiting = self._awaiting, ""
        if awaiting == "branch":
            (branch,) = children
            self.budget.update(branch.budget)
            self.budget[branch.branch] = branch.result
            self.steps.extend(branch.steps)
            waiting, self._waiting = self._waiting, None
            self._categories = [category for _, _, category in self._next]  # the free turn's messages again
            self._delta = "\n\n".join(f"<{role}> {content_text(content)}" for role, content, _ in self._next)
            self._forced = False
            return waiting
        assert awaiting == "lookups", f"children came back while awaiting {awaiting!r}"
        answered = {id(child.request): child.observation for child in children}
        for child in children:
            self.steps.extend(child.steps)
        results = [answered[id(item)] if isinstance(item, LookupRequest) else item for item in self._round]
        self._round = None
        return self._close_round(results)

    def _close_round(self, results: list):
        first = len(self.observations) + 1
        self.observations.extend(results)
        self._pending["tool_result"] = {"observations": [observation_record(o) for o in results]}
        self._pending = None
        role, s = self.settings.message_role, self.settings
        parts: list = []
        shown: dict[int, int] = {}  # id of an observation object -> the index it was first shown under
        for index, obs in enumerate(results, start=first):
            parts += format_observation(index, obs, self.setup.vision, s.page_chars, shown.get(id(obs)))
            shown.setdefault(id(obs), index)
        content = "".join(parts) if all(isinstance(p, str) for p in parts) else parts
        self._next = [(role, content, "observations")]
        return self._advance()

    # --- endings and records --------------------------------------------------------------------
    def _finish(self, result: Result) -> Done:
        self.result, self._phase = result, "done"
        self.wall_s = time.perf_counter() - self.started
        if self.branch is None:  # the main line answers every budget from the turn it ended on (rounds + 1)
            for budget in self.setup.budgets:
                if budget > result.rounds and budget not in self.budget:
                    self.budget[budget] = result
        self.reason = finish_reason(result.decision)
        return Done(self.reason)

    def fail(self, reason: str) -> Done:
        """The engine failed a turn or the context ran out: no answer."""
        self._finish(Result([UNKNOWN], None, "failed", self.turns, reason, self.rounds))
        self.reason = reason
        return Done(reason)

    def summary(self) -> dict:
        """The Q-Guide part of the trajectory (what `dossier eval` reads for its Q-Guide analyses)."""
        calls: dict[str, int] = {}
        for step in self.steps:
            if step.get("role") == "policy" and step.get("branch") is None and step["tool_call"]:
                for call in step["tool_call"]["arguments"].get("calls", []):
                    calls[call["name"]] = calls.get(call["name"], 0) + 1
        mode = "collection" if self.setup.collection else ("retrieved" if self.retrieval else "document")
        return {"mode": mode, "document": self.setup.document,
                **({"retrieval": self.retrieval} if self.retrieval else {}),
                "pages": list(self.pages), "max_rounds": self.max_rounds, "at_limit": self.setup.at_limit, "t_max_counts": "turns",
                "page_text": "withheld" if self.setup.withhold_page_text else "shown",
                "gate": self.setup.gate, "tools": self.setup.tools, "turns": self.turns, "rounds": self.rounds,
                "observations": len(self.observations),
                "tool_calls": calls, **(self.result.to_json() if self.result else {}),
                "budget": {str(k): v.to_json() for k, v in sorted(self.budget.items())},
                "cost": cost_summary(self.steps, len(self.pages), self.turns)}

    def prediction(self) -> Prediction:
        return build_prediction(self.question, self.result, self.steps, self.search_history, self.turns, self.reason,
                                self.wall_s)

    def trajectory(self) -> dict:
        return build_trajectory(self.question, self.result, self.steps, self.reason, self.summary())


def finish_reason(decision: str) -> str:
    """The prediction's `finish` for a decision: answered, abstained, max_rounds, or the failure."""
    return {"passed": "answered", "verified": "answered", "rewritten": "abstained", "submit_unknown": "max_rounds",
            "no_submission": "max_rounds"}.get(decision, decision)


def cost_summary(steps: list[dict], pages_in_context: int, turns: int) -> dict:
    """Token cost of one question, from its steps (Q-Guide's Tokens ≈ α·P + β·Σ|y| + γ·T, Appendix C).

    Budget branches (the sweep's extra forced turns) are left out: they measure, they are not the
    agent's cost. `input` is what a stateless client would send (every call's whole prompt),
    `computed` what the engine prefilled, `cached` what came from the KV cache; `pages`,
    `observations` and `turn` split the tokens appended to the conversations (turn: system
    prompt, question and instructions; generated tokens are `output`). `later_rounds_*` are the
    prompt tokens of policy turns from round 2 on, and how many of them came from the cache.
    """
    main = [s for s in steps if "branch" not in s]
    total = lambda rows, key: sum(int(r["tokens"].get(key, 0)) for r in rows)  # noqa: E731
    later = [s for s in main if s.get("round", 0) >= 2 and s["role"] in ("policy", "forced")]
    return {"pages_in_context": pages_in_context, "turns": turns, "calls": len(main),
            "input": total(main, "prefilled") + total(main, "cached"), "computed": total(main, "prefilled"),
            "cached": total(main, "cached"), "output": total(main, "generated"),
            **{key: sum(int(s.get("context", {}).get(key, 0)) for s in main) for key in ("pages", "observations", "turn")},
            "later_rounds_input": total(later, "prefilled") + total(later, "cached"),
            "later_rounds_cached": total(later, "cached"),
            "branch_calls": len(steps) - len(main), "branch_computed": total([s for s in steps if "branch" in s], "prefilled")}


def build_prediction(question: Question, result: Result | None, steps: list[dict], searches: list[str], turns: int,
                     reason: str | None, wall_s: float) -> Prediction:
    totals = {"prefilled": 0, "cached": 0, "generated": 0}
    for step in steps:
        for key in totals:
            totals[key] += int(step["tokens"].get(key, 0))
    answer = result.answer if result else [UNKNOWN]
    citations = result.submission.citations if result and result.submission and result.decision != "rewritten" else []
    extra = {"agent": "qguide", "finish": reason, "tokens": totals, "wall_s": round(wall_s, 3), "steps": len(steps),
             "decision": result.decision if result else None,
             "confidence": result.submission.confidence if result and result.submission else None}
    return Prediction(question.id, question.question, answer, list(citations), list(searches), turns, extra)


def build_trajectory(question: Question, result: Result | None, steps: list[dict], reason: str | None,
                     summary: dict) -> dict:
    final = {"answer": result.answer if result else None,
             "citations": result.to_json()["citations"] if result else [], "reason": reason}
    steps = [{**step, "step": number} for number, step in enumerate(steps, start=1)]  # every model call, in order
    return {"id": question.id, "question": question.question, "agent": "qguide", "steps": steps, "final": final,
            "qguide": summary}
