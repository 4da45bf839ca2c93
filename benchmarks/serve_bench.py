"""The server benchmark: concurrent MADQA-style agent clients against `dossier serve` and peer servers.

N client threads run BM25-agent episodes over HTTP (benchmarks/serve_client.py), each turn
re-sending the whole conversation, as MADQA's harness does against vLLM. The same clients,
questions, corpus, model and greedy decoding run against the servers below. Threads: by default
`dossier serve` runs at its own default (`--threads auto`: one per core other processes leave free)
and each peer gets every core this process may use (llama.cpp's own default is its cores too);
`threads=N` fixes every server's.

- `dossier serve` (one engine, paged KV, prefix cache, continuous batching; `--dtype` and
  `--quantization` as given);
- `llamacpp`: llama.cpp's server from the prebuilt `xllamacpp` wheel (benchmarks/llamacpp_peer.py),
  the peer a CPU user would pick. It loads the same GGUF file Dossier converts from, natively in
  its quantisation, with one slot per client, the same threads and its prompt cache on;
- `llamacpp-ngram`: the same server drafting tokens by its own n-gram lookup (ngram-simple), as many
  per step as Dossier's `--speculative-tokens`. Which of the two is the stronger peer depends on the
  model (on one Zen 5: SmolLM2's drafts slowed llama.cpp, the 1.5B's sped it up), so both run;
- `transformers serve --continuous-batching` (Hugging Face's own OpenAI-compatible server, paged
  attention with continuous batching and block sharing), float32.
vLLM and SGLang need a GPU.

The episodes use the agent's JSON turn in plain text (mode "text") unless `mode="tools"`:
`transformers serve` ignores `tool_choice` and `response_format` and parses no tool calls for a
model without a response template (SmolLM2 has none), and ignores `stream_options` (no usage in a
stream, so its cached-token fraction is unknown). llama.cpp parses tool calls with the model's
Jinja template, so the tools mode runs against it too. Each server runs alone, in its own process,
started and stopped by this benchmark; a peer that cannot start (wheel missing, no GGUF, port
taken) gets a row that says why, and the other rows still run. `orders="both"` runs the servers in
the given order and then reversed (a first server can warm the page cache for the next).
Reported per server: episodes/hour, time to first token (p50/p90), mean request latency, the
fraction of prompt tokens served from cache (when the server reports it), and per peer the ratio
of Dossier's episodes/hour to it and how many episodes took the same turns on both.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks.serve_client import EpisodeRecord, HarnessSettings, MadqaHarness

__all__ = ["ServeWorkload", "run_serve_benchmark"]

ROOT = Path(__file__).resolve().parents[1]


@dataclass(slots=True)
class ServeWorkload:
    clients: int = 8  # concurrent client threads (episodes in flight)
    episodes: int = 16  # episodes per server (questions cycled)
    max_iterations: int = 4  # model calls per episode at most; the last must answer
    k: int = 3  # pages per search
    page_chars: int = 500  # text shown per hit
    max_tokens: int = 48  # tokens per reply
    # torch (and numba) threads: None gives dossier serve its default (auto: one per core other processes leave
    # free, re-read every 2 s; idle threads then spin ~0.1 ms before sleeping) and every peer this process's cores;
    # a number fixes every server's (dossier serve then waits passively: engine/core/threads.py)
    threads: int | None = None
    kv_cache_gib: float = 1.0  # KV memory of each server
    mode: str = "text"  # "text" (every server) or "tools" (dossier and llama.cpp: MADQA's OpenAI tools)
    dtype: str = "auto"  # dossier serve --dtype
    quantization: str | None = None  # dossier serve --quantization (None, int4, int8, nf4)
    deterministic: bool = False  # dossier serve --deterministic (the batch-invariant mode, docs/determinism.md)
    # dossier serve --speculative-tokens (8: its default); the llamacpp-ngram peer drafts as many by n-gram lookup
    speculative_tokens: int = 8
    prefill_first: bool = False  # dossier serve --prefill-first (prompts-only steps while prompts wait)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _threads(workload: ServeWorkload) -> int:
    """A peer's thread count (and the cap on dossier serve's): the workload's, or every core this process may use."""
    from engine.core.threads import available_cores

    return workload.threads or available_cores()


def _env(threads: int) -> dict:
    """A server's environment, with OpenMP waiting as the user left it, not as this process chose: each server
    decides its own. llama.cpp links libgomp too (it ran with Dossier's passive waiting until 2026-12-06), and
    `dossier serve` inheriting the benchmark's OMP_WAIT_POLICY would take it for the user's and keep it."""
    from engine.core.threads import peer_environment

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads), "NUMBA_NUM_THREADS": str(threads),
           "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    return peer_environment(env)


class Server:
    """A server process; `url` once it answers /health."""

    def __init__(self, name: str, command: list[str], env: dict, model_name: str, url: str | None = None,
                 temporary: Path | None = None) -> None:
        self.name, self.url, self.model_name = name, url, model_name  # model_name: what requests must say
        self.temporary = temporary  # a folder made for this server, removed by stop()
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"dossier-bench-{name}-", suffix=".log", delete=False)
        try:
            self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True)
        except BaseException:
            self._remove_files()
            raise

    def wait(self, timeout: float = 600) -> str:
        import httpx2

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self._tail()}")
            if self.url is None:
                match = re.search(r"at (http://[\d.:]+)/v1", Path(self.log.name).read_text())
                self.url = match.group(1) if match else None
            if self.url is not None:
                try:
                    if httpx2.get(self.url + "/health", timeout=5).status_code == 200:
                        return self.url
                except httpx2.HTTPError:
                    pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not start within {timeout} s:\n{self._tail()}")

    def _tail(self) -> str:
        return Path(self.log.name).read_text()[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._remove_files()

    def _remove_files(self) -> None:
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)  # symlinks only: the model's own files stay


def start_dossier(model: str, workload: ServeWorkload) -> Server:
    command = [sys.executable, "-m", "engine.cli.main", "serve", "--model", model, "--port", "0",
               "--served-model-name", "bench", "--threads", str(workload.threads or "auto"),
               "--kv-cache-gib", str(workload.kv_cache_gib), "--dtype", workload.dtype,
               "--speculative-tokens", str(workload.speculative_tokens)]
    if workload.quantization:
        command += ["--quantization", workload.quantization]
    if workload.deterministic:
        command.append("--deterministic")
    if workload.prefill_first:
        command.append("--prefill-first")
    return Server("dossier serve", command, _env(_threads(workload)), "bench")


def start_llamacpp(model: str, workload: ServeWorkload, draft_tokens: int = 0) -> Server:
    from benchmarks.llamacpp_peer import gguf_of, llamacpp_command, missing_reason

    reason = missing_reason()
    if reason:
        raise RuntimeError(reason)
    port = _free_port()
    command = llamacpp_command(gguf_of(model), port, workload.clients, _threads(workload), draft_tokens)
    return Server(SERVER_NAMES["llamacpp-ngram" if draft_tokens else "llamacpp"], command,
                  _env(_threads(workload)), "bench", url=f"http://127.0.0.1:{port}")


def start_llamacpp_ngram(model: str, workload: ServeWorkload) -> Server:
    if not workload.speculative_tokens:
        raise RuntimeError("llamacpp-ngram drafts as many tokens as dossier serve's --speculative-tokens: give one > 0")
    return start_llamacpp(model, workload, draft_tokens=workload.speculative_tokens)


SERVERS = {"dossier": start_dossier, "llamacpp": start_llamacpp, "llamacpp-ngram": start_llamacpp_ngram,
           "transformers": None}  # transformers: below
STREAM_USAGE = {"dossier": True, "llamacpp": True, "llamacpp-ngram": True, "transformers": False}  # usage in a stream?
SERVER_NAMES = {"dossier": "dossier serve", "llamacpp": "llama.cpp server",
                "llamacpp-ngram": "llama.cpp + n-gram", "transformers": "transformers serve"}


def peer_model_folder(model: str) -> tuple[Path, bool]:
    """A folder `transformers serve` loads, and whether it is a temporary one the caller must remove.

    It is the model's own folder, or a temporary folder of symlinks to its files with a copy of its
    config naming the architecture.
    """
    from models.loading import resolve_model_dir

    folder = resolve_model_dir(model)
    config = json.loads((folder / "config.json").read_text())
    if config.get("architectures"):
        return folder, False
    # the GGUF conversion writes no `architectures`; the peer picks its model class from it
    peer = Path(tempfile.mkdtemp(prefix="dossier-peer-model-"))
    for item in folder.iterdir():
        if item.name != "config.json":
            (peer / item.name).symlink_to(item)
    classes = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
               "gemma3_text": "Gemma3ForCausalLM"}
    config["architectures"] = [classes.get(config.get("model_type"), "LlamaForCausalLM")]
    (peer / "config.json").write_text(json.dumps(config, indent=1))
    return peer, True


def start_transformers(model: str, workload: ServeWorkload) -> Server:
    folder, temporary = peer_model_folder(model)
    try:
        return _transformers_server(folder, workload, folder if temporary else None)
    except BaseException:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _transformers_server(folder: Path, workload: ServeWorkload, temporary: Path | None) -> Server:
    config = json.loads((folder / "config.json").read_text())
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    block = 32
    per_block = 2 * layers * block * kv_heads * head_dim * 4  # fp32 K and V
    blocks = max(64, int(workload.kv_cache_gib * 2**30 // per_block))  # the same KV memory as ours
    port = _free_port()
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(folder), "--continuous-batching",
               "--device", "cpu", "--dtype", "float32", "--host", "127.0.0.1", "--port", str(port),
               "--cb-block-size", str(block), "--cb-num-blocks", str(blocks), "--log-level", "warning"]
    # pinned to the folder: a request must name it exactly
    return Server("transformers serve", command, _env(_threads(workload)), str(folder),
                  url=f"http://127.0.0.1:{port}", temporary=temporary)


def run_clients(url: str, model: str, env, questions, workload: ServeWorkload, stream_usage: bool,
                progress=None) -> tuple[list[EpisodeRecord], float]:
    """Run `workload.episodes` episodes with `workload.clients` threads; return them and the wall time."""
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=1800)
    settings = HarnessSettings(mode=workload.mode, max_iterations=workload.max_iterations, k=workload.k,
                               max_tokens=workload.max_tokens, page_chars=workload.page_chars,
                               stream_usage=stream_usage)
    harness = MadqaHarness(client, model, env, settings)
    chosen = [questions[i % len(questions)] for i in range(workload.episodes)]
    started = time.perf_counter()
    done: list[EpisodeRecord] = []
    with ThreadPoolExecutor(workload.clients) as pool:
        for episode in pool.map(harness.run, chosen):
            done.append(episode)
            if progress is not None:
                progress(f"  {len(done)}/{len(chosen)} episodes ({time.perf_counter() - started:.0f} s)")
    return done, time.perf_counter() - started


def summarize(name: str, episodes: list[EpisodeRecord], wall_s: float) -> dict:
    turns = [t for e in episodes for t in e.turns]
    ttfts = sorted(t.ttft_s for t in turns if t.ttft_s is not None)
    prompt = [t.prompt_tokens for t in turns if t.prompt_tokens is not None]
    cached = [t.cached_tokens for t in turns if t.cached_tokens is not None]
    errors = [e.reason for e in episodes if e.reason.startswith("error")]
    return {
        "server": name,
        "episodes": len(episodes),
        "episodes_failed": len(errors),
        "first_error": errors[0] if errors else None,
        "requests": len(turns),
        "wall_s": round(wall_s, 2),
        "episodes_per_hour": round(len(episodes) / wall_s * 3600, 1),
        "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_p90_s": round(ttfts[math.ceil(0.9 * len(ttfts)) - 1], 3) if ttfts else None,  # nearest rank
        "mean_request_s": round(statistics.fmean(t.latency_s for t in turns), 3) if turns else None,
        "prompt_tokens": sum(prompt) if len(prompt) == len(turns) else None,
        "cached_token_fraction": round(sum(cached) / sum(prompt), 4) if cached and len(cached) == len(turns) else None,
        "answered": sum(e.reason == "answered" for e in episodes),
    }


def run_serve_benchmark(model: str = "default", workload: ServeWorkload | None = None, corpus: str | None = None,
                        questions_path: str | None = None, servers: tuple[str, ...] = ("dossier", "transformers"),
                        progress=None, orders: str = "given") -> dict:
    """Run the same client workload against each server in turn; return one row per server run.

    Args:
        model: "default", a packaged model or a local model folder (llama.cpp needs a GGUF behind it).
        workload: clients, episodes, agent settings, server threads, KV memory, Dossier's dtype.
        corpus, questions_path: an indexed corpus and its questions; None builds the sample suite.
        servers: any of "dossier", "llamacpp", "llamacpp-ngram", "transformers", run in this order.
        progress: optional callable(str) told what runs now.
        orders: "given", or "both": the given order, then reversed.
    """
    workload = workload or ServeWorkload()
    say = progress or (lambda _msg: None)
    sample_root = None
    if corpus is None:  # a sample corpus built here is removed when the benchmark ends, also on error
        corpus, questions_path = _sample_corpus(say)
        sample_root = Path(corpus).parent
    try:
        sequences = [tuple(servers)] + ([tuple(reversed(servers))] if orders == "both" and len(servers) > 1 else [])
        runs = [_run_servers(model, workload, corpus, questions_path, order, say) for order in sequences]
    finally:
        if sample_root is not None:
            shutil.rmtree(sample_root, ignore_errors=True)
    result = {"model": model, "workload": asdict(workload), "rows": [], "comparisons": []}
    for order, run in enumerate(runs, start=1):
        for row in run["rows"]:
            result["rows"].append({**row, "order": order})
        result["comparisons"].extend({**c, "order": order} for c in run["comparisons"])
    first = [c for c in result["comparisons"] if c["order"] == 1]
    if len(first) == 1:  # the two-server run's headline, as before
        result["episodes_per_hour_ratio"] = first[0]["episodes_per_hour_ratio"]
        result["episodes_with_the_same_turns"] = first[0]["episodes_with_the_same_turns"]
    return result


def _run_servers(model: str, workload: ServeWorkload, corpus: str, questions_path: str, servers: tuple[str, ...],
                 say) -> dict:
    from engine.agents.env import AgentEnv
    from engine.datasets.formats import load_questions

    questions, _errors = load_questions(questions_path)
    env = AgentEnv(corpus, page_chars=workload.page_chars)
    rows, runs = [], {}
    for name in servers:
        say(f"starting {name}")
        try:
            server = start_transformers(model, workload) if name == "transformers" else SERVERS[name](model, workload)
        except Exception as error:  # a peer that cannot start gets a row saying why; the others still run
            rows.append(_failed_row(name, f"could not start: {type(error).__name__}: {str(error)[-400:]}"))
            say(f"{name} could not start: {error}")
            continue
        try:
            try:
                url = server.wait()
            except Exception as error:
                rows.append(_failed_row(name, f"could not start: {type(error).__name__}: {str(error)[-400:]}"))
                say(f"{name} could not start: {error}")
                continue
            model_name = server.model_name
            say(f"warming up {name}")
            run_clients(url, model_name, env, questions[:2], replace(workload, episodes=2, clients=2, max_iterations=1),
                        stream_usage=STREAM_USAGE[name])
            say(f"{workload.episodes} episodes, {workload.clients} clients against {name}")
            episodes, wall = run_clients(url, model_name, env, questions, workload, stream_usage=STREAM_USAGE[name],
                                         progress=say)
        except Exception as error:
            rows.append(_failed_row(name, f"failed: {type(error).__name__}: {str(error)[-400:]}"))
            continue
        finally:
            server.stop()
        runs[name] = episodes
        rows.append({**summarize(server.name, episodes, wall), "key": name})
    comparisons = []
    if "dossier" in runs:
        ours = next(r for r in rows if r.get("key") == "dossier")
        for peer in (r for r in rows if r.get("key") not in (None, "dossier") and r.get("episodes_per_hour")):
            same = sum([t.raw for t in x.turns] == [t.raw for t in y.turns] for x, y in zip(runs["dossier"], runs[peer["key"]]))
            comparisons.append({
                "peer": peer["server"],
                "episodes_per_hour_ratio": round(ours["episodes_per_hour"] / peer["episodes_per_hour"], 3),
                "ttft_p50_ratio": (round(ours["ttft_p50_s"] / peer["ttft_p50_s"], 3)
                                   if ours["ttft_p50_s"] and peer["ttft_p50_s"] else None),
                "episodes_with_the_same_turns": same,
            })
    return {"rows": rows, "comparisons": comparisons}


def _failed_row(name: str, why: str) -> dict:
    return {"server": SERVER_NAMES[name], "key": name, "episodes": 0, "episodes_failed": 0,
            "error": why, "first_error": None, "requests": 0, "wall_s": None, "episodes_per_hour": None,
            "ttft_p50_s": None, "ttft_p90_s": None, "mean_request_s": None, "prompt_tokens": None,
            "cached_token_fraction": None, "answered": 0}


def _sample_corpus(say) -> tuple[str, str]:
    """The sample suite, ingested and indexed in a temporary folder."""
    from engine.datasets.sample import write_sample_suite
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import build_index

    root = Path(tempfile.mkdtemp(prefix="dossier-bench-serve-"))
    say(f"building the sample corpus in {root}")
    try:
        info = write_sample_suite(root / "sample")
        ingest([info["pdfs"]], root / "corpus", IngestConfig(workers=1))
        build_index(CorpusStore(root / "corpus"))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return str(root / "corpus"), str(info["questions"])
