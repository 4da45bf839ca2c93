"""`dossier run --ray`: on a local 2-CPU Ray cluster started here, a run equals a local run question by question,
survives a worker killed with SIGKILL, and a driver killed mid-run resumes; without --ray Ray is never imported.

One cluster for the module (2 CPUs, no dashboard); a tiny random Llama and the sample corpus; greedy decoding.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.core.config import EngineConfig
from tests.distributed.helpers import build_sample, build_tiny_model

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'dossier[ray]' (pinned in dev)")

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 6
OPTIONS = ["--limit", str(LIMIT), "--max-iterations", "3", "--max-new-tokens", "24", "--kv-cache-gib", "0.05",
           "--concurrency", "2", "--device", "cpu", "--format", "json"]
SETTINGS = dict(max_iterations=3, max_new_tokens=24)
ENGINE = dict(kv_cache_gib=0.05, device="cpu", quantization=None, deterministic=True)  # batch-invariant: a shard equals the whole
# the local reference run, in its own process so it can report whether anything imported Ray
LOCAL = """
import json, sys
from engine.cli.main import main
sys.argv = ["dossier", "run", *sys.argv[1:]]
try:
    main()
except SystemExit as end:
    assert not end.code, end.code
print(json.dumps({"ray_imported": "ray" in sys.modules}))
"""


def _env() -> dict:
    return os.environ | {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-data")
    questions, corpus = build_sample(root)
    return {"model": build_tiny_model(root / "model"), "questions": questions, "corpus": corpus, "root": root}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def local_run(data):
    """The reference: the same questions run locally by `dossier run` (no --ray)."""
    out = data["root"] / "local"
    cmd = [sys.executable, "-c", LOCAL, "--questions", str(data["questions"]), "--corpus", str(data["corpus"]),
           "--model", str(data["model"]), "--out", str(out), *OPTIONS]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads(done.stdout.strip().splitlines()[-1])


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _assert_same_as_local(out: Path, local: Path) -> None:
    """Each question answered exactly once, with the same model outputs, answer and citations as the local run."""
    predictions, trajectories = _lines(out / "predictions.jsonl"), _lines(out / "trajectories.jsonl")
    ids = [p["id"] for p in predictions]
    assert len(ids) == len(set(ids)) == LIMIT, ids
    assert sorted(t["id"] for t in trajectories) == sorted(ids)
    reference = {p["id"]: p for p in _lines(local / "predictions.jsonl")}
    steps = {t["id"]: [s["raw_output"] for s in t["steps"]] for t in _lines(local / "trajectories.jsonl")}
    assert set(reference) == set(ids)
    for prediction in predictions:
        ref = reference[prediction["id"]]
        assert (prediction["answer"], prediction["citations"], prediction["finish"]) == \
               (ref["answer"], ref["citations"], ref["finish"]), prediction["id"]
    for trajectory in trajectories:
        assert [s["raw_output"] for s in trajectory["steps"]] == steps[trajectory["id"]], trajectory["id"]


def _settings():
    from engine.agents.settings import AgentSettings

    return AgentSettings(agent="bm25", **SETTINGS)


def test_a_ray_run_equals_the_local_run_and_without_ray_nothing_imports_it(data, cluster, local_run, tmp_path):
    from engine.agents.launch import start_run
    from engine.distributed.launch import run_on_ray

    local, facts = local_run
    assert facts == {"ray_imported": False}
    assert len(_lines(local / "predictions.jsonl")) == LIMIT
    # every turn after the first continued its episode's session: its history came from the KV cache
    later = [s for t in _lines(local / "trajectories.jsonl") for s in t["steps"][1:]]
    assert later and all(s["tokens"]["cached"] > 0 for s in later)
    from engine.agents.run_spec import RayPlacement, RunSpec

    spec = RunSpec("bm25", str(data["model"]), data["questions"], tmp_path / "ray", data["corpus"], SETTINGS, ENGINE,
                   2, LIMIT, RayPlacement(cluster, workers=2))
    report = start_run(spec, show_progress=False, on_ray=run_on_ray)
    _assert_same_as_local(tmp_path / "ray", local)
    workers = report["ray"]["workers"]
    assert [w["episodes"] for w in workers] == [LIMIT // 2, LIMIT // 2]  # balanced shards, both workers used
    assert len({w["pid"] for w in workers}) == 2 and report["ray"]["lost"] == []
    assert "same node" in report["ray"]["corpus"]
    assert report["episodes"] == LIMIT and report["steps"] == sum(
        len(t["steps"]) for t in _lines(tmp_path / "ray" / "trajectories.jsonl"))
    assert report["engine"]["tokens_generated"] == report["tokens_generated"]  # the workers' engines, summed


def test_a_worker_killed_with_sigkill_mid_run_loses_and_repeats_nothing(data, cluster, local_run, tmp_path):
    from engine.datasets import load_questions
    from engine.distributed import RayRollout

    items = load_questions(data["questions"])[0][:LIMIT]
    killed = []
    with RayRollout.start(cluster, 2, 0.0, str(data["model"]), EngineConfig(**ENGINE), _settings(), data["corpus"], 2,
                          echo=lambda line: None) as rollout:
        victim = rollout.infos[1]["pid"]

        def kill_after_first(summary, total):
            if not killed:
                os.kill(victim, signal.SIGKILL)
                killed.append(summary.episodes)

        summary = rollout.run(items, tmp_path / "run", progress=kill_after_first)
        report = rollout.report()
    assert killed == [1]
    assert [lost["worker"] for lost in report["lost"]] == [1]
    assert summary.episodes == LIMIT
    delivered = {w["worker"]: w["episodes"] for w in report["workers"]}
    assert delivered[1] < LIMIT // 2 and delivered[0] + delivered[1] == LIMIT  # worker 0 re-ran what 1 owed
    _assert_same_as_local(tmp_path / "run", local_run[0])


@pytest.mark.slow  # two driver processes, each starting two workers: ~3 min on a busy 2-core machine
def test_a_killed_driver_resumes_with_the_same_command(data, cluster, local_run, tmp_path):
    """The driver (`dossier run --ray ADDRESS`) SIGKILLed after two episodes; the same command finishes the rest."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "engine.cli.main", "run", "--questions", str(data["questions"]), "--corpus",
           str(data["corpus"]), "--model", str(data["model"]), "--out", str(out), *OPTIONS, "--ray", cluster,
           "--workers", "2", "--concurrency", "1"]
    log = tmp_path / "driver.log"
    with log.open("w") as stderr:
        driver = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=stderr)
        predictions = out / "predictions.jsonl"
        deadline = time.time() + 300
        while time.time() < deadline and driver.poll() is None:
            if predictions.exists() and predictions.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    before = [p["id"] for p in _lines(predictions)]
    assert 2 <= len(before) < LIMIT, "the run finished before the driver could be killed"
    assert "(RolloutWorker pid=" in log.read_text()  # the workers' log lines reach the driver's stderr
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["skipped"] == len(before) and report["episodes"] == LIMIT - len(before)
    assert [p["id"] for p in _lines(predictions)][: len(before)] == before
    _assert_same_as_local(out, local_run[0])
