"""Candidate default models side by side: the BM25 agent with each model and each loop, same questions, one run.

For every (model, loop) pair this runs `dossier run --agent bm25` into OUT/<model>-<loop>
(resumable: re-running the script continues unfinished runs) and scores it with
`dossier eval`, then prints one table:

    accuracy         ANLS* >= 0.5 (MADQA), with its 95 % Wilson interval
    valid calls      model turns that parsed as a schema-valid tool call (the rest are malformed,
                     e.g. cut off by the token limit)
    1st query hit    episodes whose first search returned a gold page (MADQA's cold start)
    searches         searches per episode; `repeats` the share of them that repeat an earlier
                     query of the same episode word for word (case and spacing ignored)
    answered         episodes that ended with an answer (not at the iteration limit)
    episodes/h       throughput of that run on this machine (with the 1-minute load average
                     at its end: on a shared machine, compare within a row, not across days)

Every question of the file runs (make a subset file to run fewer: `dossier eval` counts a gold
item without a prediction as wrong).

Usage:
    python -m benchmarks.compare_models --questions Q.jsonl --corpus DIR --out OUT
        [--models default,qwen2.5-0.5b,qwen2.5-1.5b] [--loops madqa,guided] [--concurrency 16]
        [--kv-cache-gib 2] [--format json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _dossier(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine.cli.main", *args]


def _normalised(query: str) -> str:
    return " ".join(query.lower().split())


def trajectory_stats(path: Path) -> dict:
    """Valid tool calls, searches and word-for-word repeats, from a run's trajectories.jsonl."""
    steps = valid = searches = repeats = episodes = answered = 0
    for line in path.read_text().splitlines():
        episode = json.loads(line)
        episodes += 1
        answered += episode["final"]["reason"] == "answered"
        seen: set[str] = set()
        for step in episode["steps"]:
            steps += 1
            call = step.get("tool_call")
            valid += call is not None
            if call and call["name"] == "search":
                searches += 1
                query = _normalised(call["arguments"]["query"])
                repeats += query in seen
                seen.add(query)
    return {"episodes": episodes, "answered": answered, "steps": steps, "valid_calls": valid / steps if steps else None,
            "searches_per_episode": searches / episodes if episodes else None,
            "repeat_share": repeats / searches if searches else None}


def run_one(model: str, loop: str, args, env: dict) -> dict:
    out = args.out / f"{model}-{loop}"
    command = ["run", "--agent", "bm25", "--model", model, "--loop", loop, "--questions", str(args.questions),
               "--corpus", str(args.corpus), "--out", str(out), "--concurrency", str(args.concurrency),
               "--kv-cache-gib", str(args.kv_cache_gib), "--format", "json"]
    started = time.perf_counter()
    done = subprocess.run(_dossier(*command), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"dossier run failed for {model} / {loop}:\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout)
    load = os.getloadavg()[0]
    scored = subprocess.run(_dossier("eval", str(out), "--no-drift", "--format", "json"), env=env, capture_output=True,
                            text=True)
    if scored.returncode != 0:
        raise SystemExit(f"dossier eval failed for {model} / {loop}:\n{scored.stderr[-3000:]}")
    report = json.loads(scored.stdout)
    first = (report.get("steps") or {}).get("first_query") or {}
    return {"model": model, "loop": loop, "n": report["n"], "accuracy": report["accuracy"],
            "accuracy_ci": report["accuracy_ci"], "page_f1": report["page_f1"],
            "first_query_page_hit": first.get("page_hit_rate"), **trajectory_stats(out / "trajectories.jsonl"),
            **throughput(summary), "wall_s": round(time.perf_counter() - started, 1), "load_1m": round(load, 2)}


def throughput(summary: dict) -> dict:
    """Episodes per hour over every call of the run that ran episodes (a resumed call may run none)."""
    calls = [c for c in [*summary.get("earlier_calls", []), summary] if c.get("episodes")]
    episodes, seconds = sum(c["episodes"] for c in calls), sum(c["seconds"] for c in calls)
    return {"episodes_per_hour": round(3600 * episodes / seconds, 2) if seconds else None,
            "episodes_timed": episodes, "seconds": round(seconds, 2), "episodes_this_call": summary["episodes"]}


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.0f} %"


def _per_hour(value) -> str:
    return "—" if value is None else f"{value:.0f}"


def table(rows: list[dict]) -> str:
    lines = ["| model | loop | accuracy | valid calls | 1st query hit | searches (repeats) | answered | episodes/h (load) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        low, high = r["accuracy_ci"]
        lines.append(
            f"| {r['model']} | {r['loop']} | {100 * r['accuracy']:.0f} % [{100 * low:.0f}, {100 * high:.0f}] "
            f"({round(r['accuracy'] * r['n'])}/{r['n']}) | {_pct(r['valid_calls'])} | {_pct(r['first_query_page_hit'])} "
            f"| {r['searches_per_episode']:.1f} ({_pct(r['repeat_share'])}) | {r['answered']}/{r['episodes']} "
            f"| {_per_hour(r['episodes_per_hour'])} ({r['load_1m']}) |")
    return "\n".join(lines)


def _merge(path: Path, row: dict) -> None:
    """Keep every (model, loop) row measured into this folder, the latest for each pair."""
    rows = json.loads(path.read_text()) if path.exists() else []
    rows = [r for r in rows if (r["model"], r["loop"]) != (row["model"], row["loop"])] + [row]
    path.write_text(json.dumps(rows, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder of the run directories")
    parser.add_argument("--models", default="default,qwen2.5-0.5b,qwen2.5-1.5b")
    parser.add_argument("--loops", default="madqa,guided")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--kv-cache-gib", type=float, default=2.0)
    parser.add_argument("--format", choices=("human", "json"), default="human")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    rows = []
    for model in args.models.split(","):
        for loop in args.loops.split(","):
            rows.append(run_one(model, loop, args, env))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            _merge(args.out / "comparison.json", rows[-1])
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        print(table(rows))


if __name__ == "__main__":
    main()
