"""The server benchmark's figures from recorded episodes (no server: the arithmetic and the error rows), and its
clean-up of the peer's temporary model folder (a fake server process)."""

import json
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.serve_bench import summarize
from benchmarks.serve_client import EpisodeRecord, TurnRecord


def episode(qid: str, ttfts: list[float], prompt: int | None, cached: int | None, reason: str = "answered"):
    turns = [TurnRecord(ttft_s=t, latency_s=t + 1.0, prompt_tokens=prompt, cached_tokens=cached,
                        completion_tokens=5, raw="{}") for t in ttfts]
    return EpisodeRecord(qid=qid, answer=["x"], citations=[], search_history=[], turns=turns, reason=reason, wall_s=1.0)


def test_percentiles_rates_and_the_cached_fraction():
    episodes = [episode("a", [1.0, 4.0], 100, 80), episode("b", [2.0, 3.0], 100, 20),
                episode("c", [], None, None, reason="error: connection refused")]
    row = summarize("dossier serve", episodes, wall_s=36.0)
    assert row["episodes"] == 3 and row["episodes_failed"] == 1
    assert row["first_error"] == "error: connection refused"
    assert row["episodes_per_hour"] == pytest.approx(300.0)
    assert row["ttft_p50_s"] == pytest.approx(2.5)
    assert row["ttft_p90_s"] == pytest.approx(4.0)  # nearest rank: never below the median
    assert row["mean_request_s"] == pytest.approx(3.5)
    assert row["cached_token_fraction"] == pytest.approx(0.5)
    assert row["answered"] == 2


def test_a_server_without_usage_has_no_cached_fraction():
    row = summarize("transformers serve", [episode("a", [1.0, 2.0], None, None)], wall_s=10.0)
    assert row["cached_token_fraction"] is None and row["prompt_tokens"] is None
    assert row["ttft_p90_s"] == pytest.approx(2.0)


class FakeProcess:
    """Stands in for the peer server's process: records its command; `exits` makes it die at start."""

    started: list = []

    def __init__(self, command, exits: bool, **_kwargs):
        self.command, self.returncode = command, (1 if exits else None)
        folder = Path(command[command.index("serve") + 1])
        FakeProcess.started.append((folder, json.loads((folder / "config.json").read_text())))

    def poll(self):
        return self.returncode

    def terminate(self):
        self.returncode = -15

    def wait(self, timeout=None):
        return self.returncode


@pytest.mark.parametrize("exits", [False, True], ids=["finished", "server-died"])
def test_the_peer_models_temporary_folder_is_removed_when_the_benchmark_ends(tmp_path, monkeypatch, exits):
    """A model whose config names no architecture (a GGUF conversion) gets a temporary folder of symlinks
    for `transformers serve`; it is gone after the run, also when the server fails to start."""
    import benchmarks.serve_bench as bench
    import engine.agents.env
    import engine.datasets.formats

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2,
                                                   "num_attention_heads": 4, "hidden_size": 64}))
    (model / "model.safetensors").write_bytes(b"weights")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    FakeProcess.started = []
    fake = SimpleNamespace(Popen=lambda command, **kw: FakeProcess(command, exits, **kw), STDOUT=subprocess.STDOUT,
                           TimeoutExpired=subprocess.TimeoutExpired)
    monkeypatch.setattr(bench, "subprocess", fake)  # only the benchmark's own view of the module
    monkeypatch.setattr(bench.Server, "wait", lambda self, timeout=600: (
        self.url if self.process.poll() is None else (_ for _ in ()).throw(RuntimeError("exited with 1"))))
    monkeypatch.setattr(bench, "run_clients", lambda *args, **kwargs: ([], 1.0))
    monkeypatch.setattr(engine.agents.env, "AgentEnv", lambda corpus, page_chars: None)
    monkeypatch.setattr(engine.datasets.formats, "load_questions", lambda path: ([], []))

    if exits:
        with pytest.raises(RuntimeError, match="exited"):
            bench.run_serve_benchmark(str(model), corpus="c", questions_path="q", servers=("transformers",))
    else:
        result = bench.run_serve_benchmark(str(model), corpus="c", questions_path="q", servers=("transformers",))
        assert result["rows"][0]["server"] == "transformers serve"
    ((folder, config),) = FakeProcess.started
    assert folder.name.startswith("dossier-peer-model-") and folder.parent == scratch  # the peer got the copy ...
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert not folder.exists() and list(scratch.iterdir()) == []  # ... and it is gone, with the server's log
    assert (model / "model.safetensors").read_bytes() == b"weights"  # the symlinks' targets stay
