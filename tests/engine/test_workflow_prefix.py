"""The workflow agent on the real engine (tiny random model): the documents' extraction episodes run in the
same engine steps and read their shared instruction prefix from the prefix cache.

Every model call is forced to the scripted reply with an EBNF grammar of that exact string, so the
episodes behave as the scripted tests while the engine prefills, caches and decodes for real and its
counters are the ones a user's run reports."""

import json

import pytest

from engine import Engine, EngineConfig
from engine.agents.backend import EngineBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.agents.workflow.report import load_workflow_trajectories, prefix_cache_report, render_with
from engine.datasets import load_predictions
from tests.agents.workflow_scripted import build_corpus, question, workflow_policy
from tests.kernel_sandbox import needs_kernel_sandbox

pytestmark = needs_kernel_sandbox


def _literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'root ::= "{escaped}"'


class ForcedBackend(EngineBackend):
    """The engine backend, each turn's output forced to a scripted policy's reply (grammar of that string)."""

    def __init__(self, engine, policy):
        super().__init__(engine, max_new_tokens=400, structured=False)
        self.policy, self.conversations, self.first_turn_steps = policy, {}, {}

    def open(self, qid: str = ""):
        session = super().open(qid)
        self.conversations[session.session_id] = (qid, [], [0])
        return session

    def append(self, session, messages):
        super().append(session, messages)
        self.conversations[session.session_id][1].extend(messages)

    def submit(self, session, turn, seed):
        from engine.core.sampling_params import SamplingParams

        qid, messages, turns = self.conversations[session.session_id]
        turns[0] += 1
        reply = self.policy(qid, turns[0], list(messages))
        messages.append(("assistant", reply))
        if turns[0] == 1:
            self.first_turn_steps[qid] = self.engine._step + 1  # the step its prefill starts in
        return self.engine.submit(session, SamplingParams(grammar=_literal(reply), max_new_tokens=self.max_new_tokens))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("reports") / "c")


def test_documents_run_together_and_share_the_cached_prefix(tmp_path, tiny_llama, corpus):
    folder, _ = tiny_llama
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=16, num_kv_blocks=2048,
                                                              max_num_batched_tokens=8192))
    backend = ForcedBackend(engine, workflow_policy())
    summary = RolloutRunner(backend, AgentSettings(agent="workflow", structured=False), AgentEnv(corpus),
                            tmp_path).run([question()])
    preds, _ = load_predictions(tmp_path / "predictions.jsonl")
    assert preds[0].answer == "131.475" and summary.reasons == {"answered": 1}
    children = {qid: step for qid, step in backend.first_turn_steps.items() if "/" in qid and "/structure/" not in qid}
    assert len(children) == 4 and len(set(children.values())) == 1  # all four documents admitted in one step
    report = prefix_cache_report(load_workflow_trajectories(tmp_path / "trajectories.jsonl"),
                                 render_with(engine.processor))
    assert report["documents"] == 3 and report["shared_prefix_tokens"] > 300
    print(f"shared prefix {report['shared_prefix_tokens']:.0f} tokens; {100 * report['share_from_cache']:.1f}% "
          f"from cache after the first document (lowest {100 * report['min_share']:.1f}%)")
    assert report["share_from_cache"] >= 0.9 and report["min_share"] >= 0.9
    trajectory = json.loads((tmp_path / "trajectories.jsonl").read_text())
    first = trajectory["steps"][trajectory["workflow"]["extractions"][0]["step_numbers"][0] - 1]["tokens"]
    assert first["cached"] < report["shared_prefix_tokens"] * 0.5  # the first document computed the prefix itself
