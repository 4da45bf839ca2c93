"""A real-engine run stopped between steps resumes by replaying its recorded turns' token ids: the
sessions hold the tokens they held, and the run ends with the episodes an unstopped run gives (greedy,
float32, a tiny random Llama with the tool-call grammar); only the token counts differ."""

import pytest

from engine import Engine, EngineConfig
from engine.agents.backend import EngineBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from tests.agents.scripted import build_corpus, episodes_without_times, questions


class Stopped(Exception):
    pass


class StoppingBackend(EngineBackend):
    """Counts the turns it hands back; refuses the next step once `stop_after` were (a kill between steps)."""

    def __init__(self, engine, stop_after: int | None = None, **kwargs):
        super().__init__(engine, **kwargs)
        self.stop_after, self.returned, self.submitted = stop_after, 0, 0

    def submit(self, session, turn, seed):
        self.submitted += 1
        return super().submit(session, turn, seed)

    def step(self):
        if self.stop_after is not None and self.returned >= self.stop_after:
            raise Stopped
        outputs = super().step()
        self.returned += len(outputs)
        return outputs


def _run(folder, corpus, out, stop_after=None) -> tuple[StoppingBackend, object]:
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=16, num_kv_blocks=2048,
                                                              max_num_batched_tokens=1024, dtype="float32"))
    backend = StoppingBackend(engine, stop_after, max_new_tokens=40, structured=True)
    settings = AgentSettings(max_iterations=4, max_new_tokens=40, page_chars=200)
    summary = RolloutRunner(backend, settings, AgentEnv(corpus), out, concurrency=2).run(questions(3))
    return backend, summary


def test_an_engine_run_stopped_mid_episode_replays_its_turns_and_ends_as_if_never_stopped(tiny_llama, tmp_path):
    corpus = build_corpus(tmp_path / "c")
    whole, _ = _run(tiny_llama[0], corpus, tmp_path / "whole")
    assert whole.submitted >= 6
    with pytest.raises(Stopped):
        _run(tiny_llama[0], corpus, tmp_path / "cut", stop_after=3)
    recorded = len((tmp_path / "cut/turns.jsonl").read_text().splitlines())
    assert recorded >= 3
    resumed, summary = _run(tiny_llama[0], corpus, tmp_path / "cut")
    assert summary.replayed == recorded and resumed.submitted == whole.submitted - recorded
    # the same turns, tool calls and answers; only the token counts differ: the first turn generated after
    # the replay prefills the replayed history (a new engine has no KV of it), the cost a resume pays
    assert _without_counts(episodes_without_times(tmp_path / "cut")) == _without_counts(
        episodes_without_times(tmp_path / "whole"))
    assert summary.tokens_prefilled > 0


def _without_counts(record):
    if isinstance(record, (list, tuple)):
        return [_without_counts(r) for r in record]
    if isinstance(record, dict):
        return {k: _without_counts(v) for k, v in record.items() if k != "tokens"}
    return record


def test_the_history_a_resume_recomputes_stays_out_of_the_kv_reuse_share(tiny_llama, tmp_path):
    """The first turn after a replay prefills the replayed history (a new engine has none of its KV): that is
    what resuming costs, and the progress line must not blame the KV pool for it."""
    corpus = build_corpus(tmp_path / "c")
    with pytest.raises(Stopped):
        _run(tiny_llama[0], corpus, tmp_path / "cut", stop_after=3)
    _, summary = _run(tiny_llama[0], corpus, tmp_path / "cut")
    assert summary.replayed >= 3 and summary.history_tokens > 0
    assert summary.history_cached / summary.history_tokens > 0.9
