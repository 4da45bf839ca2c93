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


def test_a_peer_that_cannot_start_gets_a_row_and_the_others_still_run(monkeypatch):
    """llama.cpp's wheel missing: its row says how to install it; Dossier's row and both orders still run."""
    import benchmarks.llamacpp_peer as peer
    import benchmarks.serve_bench as bench
    import engine.agents.env
    import engine.datasets.formats

    monkeypatch.setattr(peer, "missing_reason", lambda: "xllamacpp is not installed: pip install 'dossier[bench-peers]'")
    started = []

    class Up:
        url, model_name, name = "http://127.0.0.1:1", "bench", "dossier serve"

        def wait(self):
            return self.url

        def stop(self):
            started.append("stopped")

    monkeypatch.setitem(bench.SERVERS, "dossier", lambda model, workload: started.append("dossier") or Up())
    monkeypatch.setattr(bench, "run_clients", lambda *args, **kwargs: ([episode("a", [1.0], 10, 5)], 36.0))
    monkeypatch.setattr(engine.agents.env, "AgentEnv", lambda corpus, page_chars: None)
    monkeypatch.setattr(engine.datasets.formats, "load_questions", lambda path: ([], []))
    result = bench.run_serve_benchmark("default", corpus="c", questions_path="q", servers=("llamacpp", "dossier"),
                                       orders="both")
    assert [(r["order"], r["key"]) for r in result["rows"]] == [(1, "llamacpp"), (1, "dossier"), (2, "dossier"),
                                                                 (2, "llamacpp")]
    failed = [r for r in result["rows"] if r["key"] == "llamacpp"]
    assert all("pip install 'dossier[bench-peers]'" in r["error"] for r in failed)
    assert all(r["episodes_per_hour"] == pytest.approx(100.0) for r in result["rows"] if r["key"] == "dossier")
    assert result["comparisons"] == [] and started == ["dossier", "stopped"] * 2


def test_ratios_to_each_peer_in_each_order(monkeypatch):
    import benchmarks.serve_bench as bench
    import engine.agents.env
    import engine.datasets.formats

    class Up:
        def __init__(self, name):
            self.url, self.model_name, self.name = "http://127.0.0.1:1", "bench", name

        def wait(self):
            return self.url

        def stop(self):
            pass

    walls = {"dossier serve": 18.0, "llama.cpp server": 36.0}
    ttft = {"dossier serve": 0.5, "llama.cpp server": 2.0}
    current = {}
    for key, name in [("dossier", "dossier serve"), ("llamacpp", "llama.cpp server")]:
        monkeypatch.setitem(bench.SERVERS, key, lambda model, workload, name=name: current.update(name=name) or Up(name))
    monkeypatch.setattr(bench, "run_clients", lambda *args, **kwargs: (
        [episode("a", [ttft[current["name"]]], 10, 5)], walls[current["name"]]))
    monkeypatch.setattr(engine.agents.env, "AgentEnv", lambda corpus, page_chars: None)
    monkeypatch.setattr(engine.datasets.formats, "load_questions", lambda path: ([], []))
    result = bench.run_serve_benchmark("default", corpus="c", questions_path="q", servers=("dossier", "llamacpp"),
                                       orders="both")
    assert [c["order"] for c in result["comparisons"]] == [1, 2]
    for comparison in result["comparisons"]:
        assert comparison["peer"] == "llama.cpp server"
        assert comparison["episodes_per_hour_ratio"] == pytest.approx(2.0)
        assert comparison["ttft_p50_ratio"] == pytest.approx(0.25)
        assert comparison["episodes_with_the_same_turns"] == 1
    assert result["episodes_per_hour_ratio"] == pytest.approx(2.0)


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

    result = bench.run_serve_benchmark(str(model), corpus="c", questions_path="q", servers=("transformers",))
    (row,) = result["rows"]
    assert row["server"] == "transformers serve"
    if exits:  # a peer that dies at start is a row that says why, not an exception that ends the benchmark
        assert row["error"].startswith("could not start: RuntimeError: exited with 1"), row
        assert row["episodes_per_hour"] is None
    ((folder, config),) = FakeProcess.started
    assert folder.name.startswith("dossier-peer-model-") and folder.parent == scratch  # the peer got the copy ...
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert not folder.exists() and list(scratch.iterdir()) == []  # ... and it is gone, with the server's log
    assert (model / "model.safetensors").read_bytes() == b"weights"  # the symlinks' targets stay


def test_the_dossier_server_runs_batch_invariant_only_when_asked(monkeypatch):
    """`dossier bench serve --deterministic` starts `dossier serve --deterministic`; by default the server runs as
    `dossier serve` does, without the mode (issue 48: the cost is measured with and without it)."""
    import benchmarks.serve_bench as bench

    commands = []
    monkeypatch.setattr(bench, "Server", lambda name, command, env, served: commands.append(command))
    bench.start_dossier("default", bench.ServeWorkload())
    bench.start_dossier("default", bench.ServeWorkload(deterministic=True))
    assert "--deterministic" not in commands[0] and commands[1][-1] == "--deterministic"


def test_the_dossier_server_runs_prompts_first_only_when_asked(monkeypatch):
    """`dossier bench serve --prefill-first` reaches the server (EngineConfig.prefill_first); mixed steps otherwise."""
    import benchmarks.serve_bench as bench
    from typer.testing import CliRunner

    from engine.cli.main import app

    workloads, commands = [], []
    monkeypatch.setattr(bench, "run_serve_benchmark", lambda model, workload, corpus, questions, servers, progress,
                        orders: workloads.append(workload) or {"rows": [], "comparisons": []})
    assert CliRunner().invoke(app, ["bench", "serve", "--prefill-first"]).exit_code == 0
    assert CliRunner().invoke(app, ["bench", "serve"]).exit_code == 0
    assert [w.prefill_first for w in workloads] == [True, False]
    monkeypatch.setattr(bench, "Server", lambda name, command, env, served: commands.append(command))
    for workload in workloads:
        bench.start_dossier("default", workload)
    assert commands[0][-1] == "--prefill-first" and "--prefill-first" not in commands[1]


def test_llamacpp_ngram_drafts_as_many_tokens_as_dossier_and_llamacpp_none(monkeypatch):
    """Dossier's default n-gram drafts: the llamacpp-ngram peer drafts as many by llama.cpp's own method
    (ngram-simple, n = 3), the llamacpp peer none (llama.cpp's default); either can be the stronger peer."""
    import benchmarks.llamacpp_peer as peer
    import benchmarks.serve_bench as bench

    commands = []
    monkeypatch.setattr(bench, "Server", lambda name, command, env, served, url=None: commands.append((name, command)))
    monkeypatch.setattr(peer, "missing_reason", lambda: None)
    monkeypatch.setattr(peer, "gguf_of", lambda model: "model.gguf")
    workload = bench.ServeWorkload(speculative_tokens=5)
    for key in ("dossier", "llamacpp", "llamacpp-ngram"):
        bench.SERVERS[key]("default", workload)
    (_, ours), (plain_name, plain), (ngram_name, ngram) = commands
    assert ours[ours.index("--speculative-tokens") + 1] == "5"
    assert plain[-1] == "0" and ngram[-1] == "5" and plain_name != ngram_name
    with pytest.raises(RuntimeError, match="give one > 0"):
        bench.start_llamacpp_ngram("default", bench.ServeWorkload(speculative_tokens=0))


def test_bench_serve_runs_both_llamacpp_peers_by_default_and_refuses_ngram_without_drafts(monkeypatch):
    import benchmarks.serve_bench as bench
    from typer.testing import CliRunner

    from engine.cli.main import app

    chosen = []
    monkeypatch.setattr(bench, "run_serve_benchmark", lambda model, workload, corpus, questions, servers, progress,
                        orders: chosen.append(servers) or {"rows": [], "comparisons": []})
    assert CliRunner().invoke(app, ["bench", "serve"]).exit_code == 0
    assert CliRunner().invoke(app, ["bench", "serve", "--speculative-tokens", "0"]).exit_code == 0
    assert chosen == [("dossier", "llamacpp", "llamacpp-ngram"), ("dossier", "llamacpp")]
    refused = CliRunner().invoke(app, ["bench", "serve", "--peers", "dossier,llamacpp-ngram", "--speculative-tokens",
                                       "0"])
    assert refused.exit_code != 0 and "drafts as many tokens as --speculative-tokens" in str(refused.exception)


def test_the_llamacpp_peer_turns_on_ngram_simple_only_with_draft_tokens(monkeypatch):
    """The peer process sets llama.cpp's own n-gram speculation (checked on the real xllamacpp params object)."""
    xllamacpp = pytest.importorskip("xllamacpp")
    import benchmarks.llamacpp_peer as peer

    made = []

    class Stop(Exception):
        pass

    def server(params):
        made.append(params)
        raise Stop

    monkeypatch.setattr(xllamacpp, "Server", server)
    for draft in (8, 0):
        with pytest.raises(Stop):
            peer.serve("model.gguf", 1, 2, 2, draft)
    on, off = (params.speculative for params in made)
    ngram = xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE
    assert on.types == [ngram] and on.ngram_simple.size_n == 3 and on.ngram_simple.size_m == 8 and on.draft.n_max == 8
    assert off.types == [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NONE]


def test_dossier_serve_runs_at_its_own_default_threads_unless_a_number_fixes_every_servers(monkeypatch):
    """By default the benchmark starts `dossier serve --threads auto` (its default, so its idle threads may spin
    briefly: engine/core/threads.py) and gives llama.cpp every core; `--threads N` fixes both at N."""
    import benchmarks.llamacpp_peer as peer
    import benchmarks.serve_bench as bench
    from engine.core.threads import available_cores

    started = []
    monkeypatch.setattr(bench, "Server", lambda name, command, env, served, url=None: started.append((command, env)))
    monkeypatch.setattr(peer, "missing_reason", lambda: None)
    monkeypatch.setattr(peer, "gguf_of", lambda model: "model.gguf")
    for workload in (bench.ServeWorkload(), bench.ServeWorkload(threads=1)):
        bench.start_dossier("default", workload)
        bench.start_llamacpp("default", workload)
    (ours, our_env), (theirs, their_env), (ours_fixed, _), (theirs_fixed, their_fixed_env) = started
    assert ours[ours.index("--threads") + 1] == "auto" and our_env["OMP_NUM_THREADS"] == str(available_cores())
    threads_at = theirs.index("benchmarks.llamacpp_peer") + 4  # gguf, port, slots, threads
    assert their_env["OMP_NUM_THREADS"] == theirs[threads_at] == str(available_cores())
    assert ours_fixed[ours_fixed.index("--threads") + 1] == "1" and their_fixed_env["OMP_NUM_THREADS"] == "1"
    assert theirs_fixed[threads_at] == "1"
