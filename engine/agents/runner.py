"""The rollout runner: every question an episode, many in flight at once, resumable.

Episodes are built by their agent's factory (`engine/agents/registry.py`) and drive the
runner through actions (`engine/agents/actions.py`). Loop, one model step at a time:
  1. admit questions until `concurrency` episodes are in flight (each opens a session);
  2. append the tool results that were started before the previous step — always at that
     fixed point, in start order, so a run is deterministic however fast tools finish —
     and submit the next turns;
  3. run one engine step (all episodes' prefills and decodes batched) while the tool
     thread pool works on the tools started after the last step;
  4. for each finished turn, hand the output to its episode: it starts a tool, submits
     another turn, spawns child episodes, or finishes.

Child episodes (a `Spawn`: Q-Guide's document chunks, the workflow's per-document
extractions) each get their own session and run in the same steps as everything else; a spawn's
`on_child_done` hears of each child as it ends and may add children to it (the workflow's
structuring turn for a document, while other documents are still read); when the last one
finishes, the parent continues with `on_children`. Only top-level episodes are written and
count against `concurrency`.

Each finished episode is appended to trajectories.jsonl and then predictions.jsonl
(the commit marker), with an fsync (engine/agents/run_dir.py). Every model turn of an episode in flight is
kept in turns.jsonl (its text and generated token ids), so a killed run restarted with the same --out skips
finished episodes and replays the turns its episodes in flight had finished: each is rebuilt by
running its agent again with the recorded turns instead of model calls (its tools run again), and
the model is called from the first turn never recorded. With `record` instead of `out`,
finished episodes go to that callback (a Ray worker streams them to its driver, which
writes the run directory).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from engine.agents.actions import Done, Spawn, ToolJob, Turn
from engine.agents.registry import agent_spec
from engine.agents.backend import ModelOutput
from engine.agents.run_dir import TURNS, commit_episode, finished_ids, record_turn, turns_in_flight
from engine.agents.settings import AgentSettings
from engine.datasets.formats import Question
from tools.errors import DossierError

__all__ = ["RolloutRunner", "RunSummary"]

log = logging.getLogger(__name__)

CONTEXT_NOTE = "The conversation has reached the model's context limit. Answer now with the answer tool."


@dataclass(slots=True)
class RunSummary:
    episodes: int = 0  # finished in this run
    skipped: int = 0  # already finished by an earlier run
    steps: int = 0  # model turns
    tokens_generated: int = 0
    tokens_prefilled: int = 0
    tokens_cached: int = 0
    history_tokens: int = 0  # earlier turns' tokens present at each turn (the progress line's KV reuse)
    history_cached: int = 0  # of those, served from the KV cache rather than recomputed
    replayed: int = 0  # model turns of episodes interrupted earlier, replayed from turns.jsonl (not counted in steps)
    # Tokens the engine ran in this run so far, turns still in flight included (None: the backend cannot tell).
    # The progress line's rates: a 19,000-token prompt prefills for minutes before its turn adds to the above.
    live_prefilled: int | None = None
    live_generated: int | None = None
    seconds: float = 0.0
    reasons: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        rate = lambda n: round(n / self.seconds, 2) if self.seconds else 0.0  # noqa: E731
        return {"episodes": self.episodes, "skipped": self.skipped, "steps": self.steps,
                "tokens_generated": self.tokens_generated, "tokens_prefilled": self.tokens_prefilled,
                "tokens_cached": self.tokens_cached, "seconds": round(self.seconds, 2),
                "episodes_per_hour": rate(self.episodes * 3600), "steps_per_s": rate(self.steps),
                "generated_tok_per_s": rate(self.tokens_generated), "finish_reasons": self.reasons,
                "turns_replayed": self.replayed}


@dataclass
class _Live:
    episode: object  # an AgentEpisode
    handle: object
    turn: Turn | None = None
    appended: list[int] | None = None  # token count of each message appended before the current turn
    parent: _Live | None = None  # set for a child episode
    spawn: Spawn | None = None  # a parent's spawn, while its children run
    children: list | None = None  # a parent's children (spawned and added), while they run
    children_left: int = 0
    key: str = ""  # the episode's key in turns.jsonl: its question id, or its parent's key and its place
    calls: int = 0  # model turns submitted so far
    spawns: int = 0  # a parent's spawns so far
    history: str | None = None  # the backend's fingerprint of the conversation the current turn follows
    diverged: bool = False  # a recorded turn followed another conversation: nothing more is replayed
    replayed: bool = False  # the turn now generated follows replayed ones: a new engine computes their KV


class RolloutRunner:
    """Runs episodes concurrently over a backend (`EngineBackend` or `ScriptedBackend`).

    Args:
        backend: the model backend.
        settings: the agent settings (also decide which agent runs).
        env: the corpus environment (None for closed-book).
        out: the run directory (predictions.jsonl, trajectories.jsonl).
        concurrency: episodes in flight at once.
        tool_threads: threads running tool calls.
        progress: called as progress(summary, total) once at the start (a resumed run's finished episodes count
            as done), then after every model step and every finished episode.
        record: called as record(trajectory, prediction, reason) (a dict, a `Prediction`, a str) for each
            finished episode instead of writing them to `out` (then `out` may be None, and nothing is
            skipped as already finished: the caller decides what to run).
    """

    def __init__(self, backend, settings: AgentSettings, env, out: str | Path | None, concurrency: int = 16,
                 tool_threads: int = 4, progress: Callable[[RunSummary, int], None] | None = None,
                 record: Callable[[dict, dict, str], None] | None = None):
        if concurrency < 1:
            raise DossierError(f"concurrency must be at least 1 (got {concurrency})")
        assert out is not None or record is not None, "a runner needs a run directory or a record callback"
        self.backend, self.settings, self.env = backend, settings, env
        self.out = Path(out) if out is not None else None
        self.concurrency, self.tool_threads, self.progress, self.record = concurrency, tool_threads, progress, record

    def run(self, questions: list[Question]) -> RunSummary:
        done: set[str] = set()
        if self.record is None:
            self.out.mkdir(parents=True, exist_ok=True)
            done = finished_ids(self.out)
        todo = deque(q for q in questions if q.id not in done)
        summary = RunSummary(skipped=len(questions) - len(todo))
        self._replay = turns_in_flight(self.out, done) if self.record is None else {}
        if self._replay:
            log.info("replaying %d model turns of episodes in flight when %s was stopped", len(self._replay), self.out)
        self._replayed: list[tuple[object, ModelOutput]] = []  # recorded turns handed back at the next step
        self._total = len(questions)
        spec = agent_spec(self.settings.agent)
        start = time.perf_counter()
        self._live: dict[object, _Live] = {}  # backend ticket -> episode waiting for its model turn
        self._started_tools: list[tuple[Future, _Live]] = []  # tools started after the latest step
        self.summary = summary
        live_tokens = getattr(self.backend, "live_tokens", None)
        live_start = live_tokens() if live_tokens else None
        if self.progress:  # a resumed run shows its finished episodes before its first (long) step ends
            self.progress(summary, self._total)
        in_flight = 0
        with ThreadPoolExecutor(self.tool_threads, thread_name_prefix="dossier-tool") as pool:
            self._pool = pool
            while todo or in_flight:
                while todo and in_flight < self.concurrency:
                    question = todo.popleft()
                    state = _Live(spec.build(question, self.settings, self.env), self.backend.open(question.id),
                                  key=question.id)
                    in_flight += 1
                    in_flight -= self._advance(state, state.episode.first_turn())
                # tools started before the previous step: their results join now, in start order
                ready, self._started_tools = self._started_tools, []
                replayed, self._replayed = self._replayed, []
                # with no model work pending there is nothing to overlap: the tools are awaited at once
                stepped = self.backend.has_pending()
                outputs = self.backend.step() if stepped else []
                if in_flight and not outputs and not ready and not replayed and not self.backend.has_pending():
                    raise RuntimeError(f"rollout stalled with {in_flight} episodes in flight")  # a bug, never input
                for future, state in ready:
                    in_flight -= self._advance(state, state.episode.on_tool_result(future.result()))
                for ticket, output in replayed + outputs:
                    state = self._live.pop(ticket)
                    if output.replayed:
                        summary.replayed += 1
                    else:
                        summary.steps += 1
                        # the first turn after a replay computes the replayed history: the cost of resuming,
                        # not of a pool too small, so it stays out of the KV reuse share
                        kept = (("history", "history_tokens"), ("history_cached", "history_cached"))
                        for key, name in (("generated", "tokens_generated"), ("prefilled", "tokens_prefilled"),
                                          ("cached", "tokens_cached"), *(() if state.replayed else kept)):
                            setattr(summary, name, getattr(summary, name) + int(output.tokens.get(key, 0)))
                        state.replayed = False
                    if output.error:
                        log.warning("question %s: the engine failed a turn: %s", state.episode.question.id, output.error)
                        in_flight -= self._advance(state, state.episode.fail("error"))
                        continue
                    if not output.replayed and self.record is None:
                        self._keep_turn(state, output)
                    tokens = output.tokens if state.appended is None else {**output.tokens, "appended": state.appended}
                    action = state.episode.on_output(output.text, state.turn, tokens, output.model_s)
                    in_flight -= self._advance(state, action)
                summary.seconds = time.perf_counter() - start
                if live_start is not None:
                    prefilled, generated = live_tokens()
                    summary.live_prefilled, summary.live_generated = prefilled - live_start[0], generated - live_start[1]
                if self.progress and (outputs or stepped):  # the rates move while long prompts prefill
                    self.progress(summary, self._total)
        if self.record is None and (self.out / TURNS).exists():
            (self.out / TURNS).unlink()  # every episode finished: its turns are in trajectories.jsonl
        return summary

    def _keep_turn(self, state: _Live, output: ModelOutput) -> None:
        """Record a finished model turn of an episode in flight, so that a killed run replays it."""
        top = state
        while top.parent is not None:
            top = top.parent
        record_turn(self.out, {"id": top.episode.question.id, "episode": state.key, "turn": state.calls - 1,
                               "history": state.history, "text": output.text, "token_ids": output.token_ids, "tokens": output.tokens,
                               "model_s": output.model_s})

    def _advance(self, state: _Live, action) -> int:
        """Carry out an episode's action; returns 1 when a top-level episode ended (0 otherwise)."""
        if isinstance(action, Turn):
            if not self.backend.fits(state.handle, action.messages, action.max_new_tokens):
                action = state.episode.force_answer(CONTEXT_NOTE)
                if not self.backend.fits(state.handle, action.messages, action.max_new_tokens):
                    return self._advance(state, state.episode.fail("context_exhausted"))
            state.appended = self.backend.append(state.handle, action.messages)
            state.turn = action
            state.calls += 1
            if self.record is None and hasattr(self.backend, "fingerprint"):
                state.history = self.backend.fingerprint(state.handle)
            recorded = self._replay.pop((state.key, state.calls - 1), None)
            # a record without a fingerprint (written before they were kept) is taken as it is
            if recorded is not None and not state.diverged and recorded.get("history", state.history) != state.history:
                log.warning("question %s: the recorded turn %d followed another conversation (a tool's result "
                            "changed since it was recorded?); it and the episode's later turns are generated again",
                            state.key, state.calls - 1)
                state.diverged = True
            if recorded is not None and not state.diverged and self.backend.replay(state.handle, recorded):
                state.replayed = True
                ticket = object()
                self._replayed.append((ticket, ModelOutput(str(recorded.get("text", "")), dict(recorded.get("tokens") or {}),
                                                           float(recorded.get("model_s") or 0.0), replayed=True)))
            else:
                ticket = self.backend.submit(state.handle, action, self._seed(state.episode))
            self._live[ticket] = state
            return 0
        if isinstance(action, ToolJob):
            self._started_tools.append((self._pool.submit(action.run), state))
            return 0
        if isinstance(action, Spawn):
            if not action.children:
                return self._advance(state, state.episode.on_children([]))
            state.spawn, state.children, state.children_left = action, [], 0
            state.spawns += 1
            return self._start_children(state, list(action.children))
        assert isinstance(action, Done), f"an episode returned {action!r}, not an action"
        self.backend.close(state.handle)
        if state.parent is not None:  # a child: the parent continues once all its children are done
            parent, ended = state.parent, 0
            if parent.spawn.on_child_done is not None:
                # started while this child still counts, so none of them can end the spawn early
                ended += self._start_children(parent, list(parent.spawn.on_child_done(state.episode)))
            parent.children_left -= 1
            if parent.children_left:
                return ended
            children, parent.children, parent.spawn = parent.children, None, None
            return ended + self._advance(parent, parent.episode.on_children(children))
        episode = state.episode
        if self.record is not None:
            self.record(episode.trajectory(), episode.prediction(), action.reason)
        else:
            commit_episode(self.out, episode.trajectory(), episode.prediction())
        summary = self.summary
        summary.episodes += 1
        summary.reasons[action.reason] = summary.reasons.get(action.reason, 0) + 1
        if self.progress:
            self.progress(summary, self._total)
        return 1

    def _start_children(self, parent: _Live, children: list) -> int:
        """Open a session for each child of the parent's spawn and submit its first turn.

        All are counted before the first starts: a child that ends at once (its first turn does not
        fit) cannot bring the count to zero while its siblings are still to start.
        """
        first = len(parent.children)
        parent.children += children
        parent.children_left += len(children)
        ended = 0
        for place, child in enumerate(children, first):
            handle = (self.backend.fork(parent.handle, child.question.id) if parent.spawn.fork
                      else self.backend.open(child.question.id))
            key = f"{parent.key}/{parent.spawns}.{place}"
            ended += self._advance(_Live(child, handle, parent=parent, key=key), child.first_turn())
        return ended

    def _seed(self, episode) -> int:
        """Per-turn seed from the run seed, the question and the step: independent of scheduling."""
        key = f"{self.settings.seed}:{episode.question.id}:{episode.iterations}".encode()
        return zlib.crc32(key)
