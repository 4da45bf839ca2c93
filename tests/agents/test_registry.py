"""The agent registry and the runner's generic actions: one registration per agent, child episodes, per-turn schemas."""

import json
from dataclasses import dataclass, field

import pytest

from engine.agents import registry
from engine.agents.actions import Done, Spawn, ToolJob, Turn
from engine.agents.backend import EngineBackend, ScriptedBackend
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets.formats import Prediction, Question
from tests.agents.scripted import questions
from tools.errors import DossierError

ANSWER_SCHEMA = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}


@dataclass
class _Child:
    """Asks the model once for a value, with its own schema."""

    question: Question
    raw: str | None = None
    steps: int = 0

    @property
    def iterations(self):
        return self.steps

    def first_turn(self):
        return Turn([("user", f"part {self.question.id}")], allow_search=False, schema=ANSWER_SCHEMA, max_new_tokens=7)

    def on_output(self, raw, turn, tokens, model_s):
        self.steps += 1
        self.raw = raw
        return Done("answered")

    def fail(self, reason):
        return Done(reason)


@dataclass
class _Parent:
    """Runs a tool, spawns two children, then answers with what they returned."""

    question: Question
    settings: AgentSettings
    env: object = None
    log: list = field(default_factory=list)

    @property
    def iterations(self):
        return 0

    def first_turn(self):
        return ToolJob(lambda: "tool ran")

    def on_tool_result(self, value):
        self.log.append(value)
        return Spawn([_Child(Question(f"{self.question.id}/{i}", "", [], [])) for i in range(2)])

    def on_children(self, children):
        self.log.append([c.raw for c in children])
        return Done("answered")

    def fail(self, reason):
        return Done(reason)

    def prediction(self):
        return Prediction(self.question.id, self.question.question, self.log[-1], [], [], 0, {})

    def trajectory(self):
        return {"id": self.question.id, "question": self.question.question, "agent": "toy", "steps": [],
                "final": {"answer": self.log[-1], "citations": [], "reason": "answered"}, "log": self.log}


@pytest.fixture
def toy_agent(monkeypatch):
    spec = registry.AgentSpec("toy", "test agent", f"{__name__}:_Parent", needs_corpus=False)
    monkeypatch.setitem(registry._AGENTS, "toy", spec)
    return spec


def test_unknown_agents_are_refused_with_the_registered_names():
    with pytest.raises(DossierError, match="unknown agent 'nope'; choose one of bm25, rag, oracle, closed-book"):
        AgentSettings(agent="nope")
    assert registry.agent_names()[:4] == ("bm25", "rag", "oracle", "closed-book")
    assert not registry.agent_spec("closed-book").needs_corpus and registry.agent_spec("bm25").needs_corpus


def test_children_run_in_the_same_steps_and_hand_back_to_their_parent(tmp_path, toy_agent):
    def policy(qid, turn, messages):
        return json.dumps({"value": qid})

    backend = ScriptedBackend(policy)
    summary = RolloutRunner(backend, AgentSettings(agent="toy"), None, tmp_path, concurrency=3).run(questions(3))
    assert summary.episodes == 3 and summary.steps == 6
    trajectories = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "trajectories.jsonl").open()}
    assert set(trajectories) == {"q1", "q2", "q3"}  # children are not written, their parents are
    assert trajectories["q2"]["log"] == ["tool ran", ['{"value": "q2/0"}', '{"value": "q2/1"}']]
    assert backend.opened == backend.closed == 3 + 6
    # every child turn carried its own schema and token budget to the backend
    child_turns = [turn for qid, turn in backend.submitted if "/" in qid]
    assert len(child_turns) == 6 and all(t.schema == ANSWER_SCHEMA and t.max_new_tokens == 7 for t in child_turns)


def test_a_rerun_skips_finished_parents(tmp_path, toy_agent):
    backend = ScriptedBackend(lambda qid, turn, messages: "{}")
    RolloutRunner(backend, AgentSettings(agent="toy"), None, tmp_path).run(questions(2))
    again = ScriptedBackend(lambda qid, turn, messages: "{}")
    summary = RolloutRunner(again, AgentSettings(agent="toy"), None, tmp_path).run(questions(3))
    assert summary.skipped == 2 and summary.episodes == 1 and again.opened == 1 + 2


class _FakeEngine:
    processor = None
    max_context = 100

    def __init__(self):
        self.params = []

    def submit(self, session, params):
        self.params.append(params)
        return len(self.params)


def test_the_engine_backend_uses_a_turns_schema_and_budget_else_the_tool_call_schema():
    engine = _FakeEngine()
    backend = EngineBackend(engine, max_new_tokens=64, structured=True)
    backend.submit(None, Turn([], allow_search=True), seed=1)
    backend.submit(None, Turn([], allow_search=False, schema=ANSWER_SCHEMA, max_new_tokens=9), seed=2)
    default, own = engine.params
    assert default.max_new_tokens == 64 and default.json_schema == backend.schemas[True]
    assert own.max_new_tokens == 9 and own.json_schema == ANSWER_SCHEMA
