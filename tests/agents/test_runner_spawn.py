"""A spawn's `on_child_done`: the parent hears of each child as it ends and adds children to the same spawn.

A toy parent spawns readers that take different numbers of turns; as each reader ends, the parent adds
a one-turn writer for it. The writer of the fast reader is submitted while the slow reader still runs,
and `on_children` comes once, after the last writer, with every child.
"""

import json
from dataclasses import dataclass, field

import pytest

from engine.agents import registry
from engine.agents.actions import Done, Spawn, Turn
from engine.agents.backend import ScriptedBackend
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets.formats import Prediction, Question
from tests.agents.scripted import questions

TURNS = {"fast": 1, "slow": 3}  # model turns each reader takes


@dataclass
class _Child:
    question: Question
    turns: int  # model turns before it ends
    prompt: str = "go"
    steps: int = 0

    @property
    def iterations(self):
        return self.steps

    def first_turn(self):
        return Turn([("user", self.prompt)], allow_search=False)

    def on_output(self, raw, turn, tokens, model_s):
        self.steps += 1
        return Done("answered") if self.steps >= self.turns else Turn([("user", "more")], allow_search=False)

    def force_answer(self, note):
        return Turn([("user", self.prompt + note)], allow_search=False)  # a prompt too long still does not fit

    def fail(self, reason):
        return Done(reason)


@dataclass
class _Parent:
    """Spawns the readers; each one that ends gets a writer (`<reader>+w`); answers with the children's order."""

    question: Question
    settings: AgentSettings
    env: object = None
    heard: list = field(default_factory=list)  # ids of the children as on_child_done heard of them
    handed: list = field(default_factory=list)  # ids of the children on_children received

    @property
    def iterations(self):
        return 0

    def first_turn(self):
        readers = [_Child(Question(f"{self.question.id}/{name}", "", [], []), turns) for name, turns in TURNS.items()]
        return Spawn(readers, on_child_done=self._on_child_done)

    def _on_child_done(self, child):
        self.heard.append(child.question.id)
        if child.question.id.endswith("+w"):
            return []
        prompt = "x" * 10_000 if child.question.id.endswith("/slow") else "write"  # the slow one's cannot fit
        return [_Child(Question(child.question.id + "+w", "", [], []), 1, prompt)]

    def on_children(self, children):
        self.handed = [c.question.id for c in children]
        return Done("answered")

    def fail(self, reason):
        return Done(reason)

    def prediction(self):
        return Prediction(self.question.id, self.question.question, json.dumps(self.handed), [], [], 0, {})

    def trajectory(self):
        return {"id": self.question.id, "question": self.question.question, "agent": "toy", "steps": [],
                "final": {"answer": None, "citations": [], "reason": "answered"}, "heard": self.heard,
                "handed": self.handed}


@pytest.fixture
def toy_agent(monkeypatch):
    spec = registry.AgentSpec("toy-spawn", "test agent", f"{__name__}:_Parent", needs_corpus=False)
    monkeypatch.setitem(registry._AGENTS, "toy-spawn", spec)
    return spec


def test_a_child_added_as_another_ends_runs_while_its_siblings_still_run(tmp_path, toy_agent):
    backend = ScriptedBackend(lambda qid, turn, messages: "{}", context_chars=5_000)
    summary = RolloutRunner(backend, AgentSettings(agent="toy-spawn"), None, tmp_path, concurrency=2).run(questions(2))
    assert summary.episodes == 2 and summary.reasons == {"answered": 2}
    order = [qid for qid, _ in backend.submitted if qid.startswith("q1/")]
    # the fast reader's writer is submitted before the slow reader's last two turns
    assert order == ["q1/fast", "q1/slow", "q1/fast+w", "q1/slow", "q1/slow"]
    trajectories = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "trajectories.jsonl").open()}
    # the slow reader's writer does not fit the context: it ends at once, and the spawn still waits for it
    assert trajectories["q1"]["heard"] == ["q1/fast", "q1/fast+w", "q1/slow", "q1/slow+w"]
    assert trajectories["q1"]["handed"] == ["q1/fast", "q1/slow", "q1/fast+w", "q1/slow+w"]  # spawned, then added
    assert backend.opened == backend.closed == 2 * (1 + 4)  # each parent, its two readers and two writers
