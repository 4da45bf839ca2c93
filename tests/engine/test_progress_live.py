"""The run's progress line counts the tokens of turns still running.

A FinanceBench filesearch prompt is about 19,000 tokens: on 2 cores it prefills for ten minutes
before its turn ends, and a line that counted finished turns only read `0 tok/s prefilled` all
that time. The engine's own counters move every step; the runner reports them after every step."""

from engine import Engine, EngineConfig
from engine.agents.backend import EngineBackend
from engine.agents.env import AgentEnv
from engine.agents.launch import progress_callback
from engine.agents.runner import RolloutRunner, RunSummary
from engine.agents.settings import AgentSettings
from tests.agents.scripted import build_corpus, questions


def test_progress_counts_the_prompt_tokens_of_a_turn_still_prefilling(tiny_llama, tmp_path):
    engine = Engine.from_pretrained(str(tiny_llama[0]), EngineConfig(block_size=16, num_kv_blocks=2048,
                                                                     max_num_batched_tokens=64, dtype="float32"))
    backend = EngineBackend(engine, max_new_tokens=16, structured=True)
    seen = []

    def progress(summary, total):
        seen.append((summary.steps, summary.tokens_prefilled, summary.live_prefilled, summary.live_generated))

    settings = AgentSettings(max_iterations=1, max_new_tokens=16, page_chars=200)
    summary = RolloutRunner(backend, settings, AgentEnv(build_corpus(tmp_path / "c")), tmp_path / "run",
                            concurrency=1, progress=progress).run(questions(1))
    before_first_turn = [s for s in seen if s[0] == 0 and s[2]]
    # the first prompt takes several 64-token steps, each reported with what it prefilled so far
    assert len(before_first_turn) >= 3
    assert [s[2] for s in before_first_turn] == sorted(s[2] for s in before_first_turn)
    assert all(s[1] == 0 for s in before_first_turn)  # the finished turns' count has nothing yet
    # once every turn has ended the engine's counts are the finished turns' counts
    assert summary.live_prefilled == summary.tokens_prefilled > 0
    assert summary.live_generated == summary.tokens_generated > 0


class _Line:
    def phase(self, text):
        pass

    def update(self, done=None, total=None, detail=None):
        self.detail = detail


def test_the_line_reads_the_engine_counts_when_the_backend_has_them():
    line = _Line()
    progress = progress_callback(line, 50)
    progress(RunSummary(seconds=100.0, live_prefilled=2_800, live_generated=0), 50)
    assert "28 tok/s prefilled" in line.detail
    progress(RunSummary(seconds=100.0, tokens_prefilled=900, tokens_generated=50), 50)  # a backend without them
    assert "9 tok/s prefilled" in line.detail and "0.5 tok/s generated" in line.detail
