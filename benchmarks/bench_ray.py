"""Episodes per hour on Ray with 1 and 2 workers against a local run, and the driver's cost per episode.

Same questions, same tiny random Llama (tests/distributed/helpers.py; this machine may hold one
real model at a time, and two workers would load two), the sample corpus, greedy decoding, the
bm25 agent with short turns. Rows, each after one warm-up run of the same shape:
  local-1t   one engine in this process, 1 CPU thread (what one Ray worker reserves)
  local-2t   one engine in this process, 2 CPU threads (the strongest single process here)
  ray-1w     one Ray worker (1 CPU), driver in this process
  ray-2w     two Ray workers (1 CPU each), balanced shards
The driver's overhead per episode is its wall time spent merging (not waiting on workers) and
its process CPU time (Ray's client threads included) divided by the episodes: that bounds how
many workers one driver can feed. Expect little gain from 2 workers on 2 shared cores.

Usage (under the exclusive CPU lock):
    flock -x /tmp/dossier-cpu.lock .venv/bin/python -m benchmarks.bench_ray [--questions 20] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETTINGS = dict(max_iterations=3, max_new_tokens=24)


def _local(model, questions, corpus, items, out, threads, concurrency) -> dict:
    from engine.agents.backend import engine_backend
    from engine.agents.env import AgentEnv
    from engine.agents.runner import RolloutRunner
    from engine.agents.settings import AgentSettings
    from engine.core.config import EngineConfig

    settings = AgentSettings(agent="bm25", **SETTINGS)
    env = AgentEnv(corpus, settings.page_chars, settings.search_mode)
    _, settings, backend = engine_backend(str(model), EngineConfig(kv_cache_gib=0.1, device="cpu", cpu_threads=threads),
                                          settings, env)
    RolloutRunner(backend, settings, env, out / "warm", concurrency).run(items[:concurrency])  # warm-up
    summary = RolloutRunner(backend, settings, env, out / "timed", concurrency).run(items)
    return {"episodes": summary.episodes, "seconds": round(summary.seconds, 2)}


def _ray(model, corpus, items, out, workers, concurrency) -> dict:
    from engine.agents.settings import AgentSettings
    from engine.core.config import EngineConfig
    from engine.distributed import RayRollout

    settings = AgentSettings(agent="bm25", **SETTINGS)
    engine_config = EngineConfig(kv_cache_gib=0.1, device="cpu")
    with RayRollout.start("local", workers, 0.0, str(model), engine_config, settings, corpus, concurrency,
                          echo=lambda line: print(line, file=sys.stderr)) as rollout:
        rollout.run(items[:concurrency * workers], out / "warm")  # warm-up: every worker's first turns
        summary = rollout.run(items, out / "timed")
        report = rollout.report()
    return {"episodes": summary.episodes, "seconds": round(summary.seconds, 2),
            "driver_busy_ms_per_episode": round(1000 * report["driver_busy_s"] / summary.episodes, 2),
            "driver_cpu_ms_per_episode": round(1000 * report["driver_cpu_s"] / summary.episodes, 2),
            "per_worker": [w["episodes"] for w in report["workers"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20, help="sample questions (the suite has 20)")
    parser.add_argument("--concurrency", type=int, default=4, help="episodes in flight per engine")
    parser.add_argument("--rows", default="local-1t,local-2t,ray-1w,ray-2w")
    args = parser.parse_args()
    from engine.datasets import load_questions
    from tests.distributed.helpers import build_sample, build_tiny_model

    root = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    model = build_tiny_model(root / "model")
    questions, corpus = build_sample(root)
    items = load_questions(questions)[0][: args.questions]
    rows = {}
    for name in args.rows.split(","):
        started = time.perf_counter()
        if name.startswith("local"):
            threads = int(name.split("-")[1][:-1])
            row = _local(model, questions, corpus, items, root / name, threads, args.concurrency * 2)
        else:
            workers = int(name.split("-")[1][:-1])
            row = _ray(model, corpus, items, root / name, workers, args.concurrency * (2 // workers))
        row["episodes_per_hour"] = round(3600 * row["episodes"] / row["seconds"])
        row["wall_with_startup_s"] = round(time.perf_counter() - started, 1)
        rows[name] = row
        print(name, json.dumps(row), file=sys.stderr)
    result = {"questions": len(items), "concurrency_total": args.concurrency * 2, "rows": rows}
    if "ray-1w" in rows and "ray-2w" in rows:
        result["speedup_2w_vs_1w"] = round(rows["ray-2w"]["episodes_per_hour"] / rows["ray-1w"]["episodes_per_hour"], 2)
    if "ray-2w" in rows and "local-2t" in rows:
        result["ray_2w_vs_local_2t"] = round(rows["ray-2w"]["episodes_per_hour"] / rows["local-2t"]["episodes_per_hour"], 2)
    if "ray-1w" in rows and "local-1t" in rows:
        result["ray_1w_vs_local_1t"] = round(rows["ray-1w"]["episodes_per_hour"] / rows["local-1t"]["episodes_per_hour"], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
