"""Load sensitivity: the demo's agent run alone, beside a one-core busy loop, and beside a second model job.

A user's 2-core machine is rarely idle. This runs `dossier run --agent bm25` (the demo's
agent run: the sample suite, the embedded model) as a subprocess in three conditions and
prints its wall time in each and the ratio to running alone:

    alone   nothing else running
    busy    beside one process spinning on one core (`while True: pass`)
    model   beside a second, identical agent run (restarted in a loop so it stays busy)

A variant is a policy applied to the measured run and the second model job alike (every
Dossier process on the machine). `ours` is Dossier's defaults (OpenMP threads sleep when
idle; the forward uses one thread per core other processes leave free, engine/core/threads.py);
`before` is what Dossier did before: libgomp's stock spin-waiting (`GOMP_SPINCOUNT=300000`,
its default when OMP_WAIT_POLICY is unset) and a fixed 2 threads. `passive-2` and
`spin-auto` are the two halves alone, so each gain is attributed; `short-spin` lets idle threads spin
about 0.1 ms before sleeping (faster alone, much slower under load: docs/benchmarks.md). Times are the measured
run's episodes (its `run_summary.json` seconds, model load excluded) and its whole process.

Usage:
    python -m benchmarks.bench_load [--limit 8] [--conditions alone,busy,model] [--variants ours,before]
        [--work DIR] [--model default] [--format json]
With no --work it builds the sample suite in a temporary folder. Run it alone on the machine
(`flock -x /tmp/dossier-cpu.lock ...` here): the point is the load it adds itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# variant -> (environment, extra `dossier run` arguments), for the measured run and the second job alike
VARIANTS = {
    "ours": ({}, []),  # Dossier's defaults: OpenMP threads sleep when idle, threads follow the free cores
    "before": ({"GOMP_SPINCOUNT": "300000"}, ["--threads", "2"]),  # stock libgomp spin-waiting, 2 threads always
    "passive-2": ({}, ["--threads", "2"]),  # ablation: the wait policy alone
    "spin-auto": ({"GOMP_SPINCOUNT": "300000"}, []),  # ablation: the adaptive thread count alone
    "short-spin": ({"GOMP_SPINCOUNT": "10000"}, []),  # idle threads spin ~0.1 ms, then sleep
}
CONDITIONS = ("alone", "busy", "model")


def _dossier(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine.cli.main", *args]


def _env(extra: dict) -> dict:
    env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return env


def prepare(work: Path) -> tuple[Path, Path]:
    """The sample suite, ingested and indexed, under `work` (built once)."""
    questions, corpus = work / "sample" / "questions.jsonl", work / "corpus"
    if not (corpus / "index").exists():
        env = _env({})
        for args in (("sample", "--out", str(work / "sample")), ("ingest", str(work / "sample" / "pdfs"), "--corpus",
                     str(corpus)), ("index", "--corpus", str(corpus))):
            subprocess.run(_dossier(*args), check=True, env=env, stdout=subprocess.DEVNULL)
    return questions, corpus


def _run_args(questions: Path, corpus: Path, out: Path, model: str, limit: int, extra: list[str]) -> list[str]:
    return _dossier("run", "--agent", "bm25", "--model", model, "--questions", str(questions), "--corpus", str(corpus),
                    "--out", str(out), "--limit", str(limit), "--format", "json", *extra)


def _start_load(condition: str, env: dict, extra: list[str], questions: Path, corpus: Path, work: Path, model: str,
                limit: int) -> subprocess.Popen | None:
    if condition == "alone":
        return None
    if condition == "busy":
        return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    out = work / "second-job"
    loop = (f"while true; do rm -rf '{out}'; {' '.join(map(_quote, _run_args(questions, corpus, out, model, limit, extra)))} "
            f">/dev/null 2>&1; done")
    return subprocess.Popen(["bash", "-c", loop], env=env, start_new_session=True)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the loop and the run it started
    except ProcessLookupError:
        pass
    proc.wait()


def measure(variant: str, condition: str, questions: Path, corpus: Path, work: Path, model: str, limit: int,
            settle_s: float, timeout_s: float | None = None) -> dict:
    """One measured agent run under one condition; returns its timings."""
    extra_env, extra_args = VARIANTS[variant]
    env = _env(extra_env)
    out = work / f"run-{variant}-{condition}"
    shutil.rmtree(out, ignore_errors=True)
    load = _start_load(condition, env, extra_args, questions, corpus, work, model, limit)
    try:
        if load is not None:
            time.sleep(settle_s)  # the second job is past its model load and generating
        start = time.perf_counter()
        try:
            done = subprocess.run(_run_args(questions, corpus, out, model, limit, extra_args), env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:  # the pathological case: report it as "more than", never wait hours
            return {"variant": variant, "condition": condition, "episodes": None, "run_s": None,
                    "process_s": round(time.perf_counter() - start, 2), "timed_out": True, "steps": None,
                    "threads_at_end": None, "thread_changes": None, "load_1m": round(os.getloadavg()[0], 2)}
        wall = time.perf_counter() - start
    finally:
        _stop(load)
    if done.returncode != 0:
        raise SystemExit(f"the measured run failed ({variant}, {condition}):\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    threads = report.get("cpu_threads") or {}
    return {"variant": variant, "condition": condition, "episodes": report["episodes"], "run_s": report["seconds"],
            "process_s": round(wall, 2), "steps": report["steps"], "threads_at_end": threads.get("now"),
            "thread_changes": threads.get("changes"), "load_1m": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="folder for the sample corpus and run directories (default: temp)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--limit", type=int, default=8, help="questions of the sample suite to run")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--variants", default="ours,before", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds the load runs before the measured run")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="stop a measured run after this many seconds and report it as longer")
    parser.add_argument("--format", choices=("human", "json"), default="human")
    args = parser.parse_args()
    conditions, variants = args.conditions.split(","), args.variants.split(",")
    for name in conditions:
        if name not in CONDITIONS:
            parser.error(f"unknown condition {name!r}; choose from {', '.join(CONDITIONS)}")
    for name in variants:
        if name not in VARIANTS:
            parser.error(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="dossier-load-"))
    work.mkdir(parents=True, exist_ok=True)
    questions, corpus = prepare(work)
    # warm-up: converts the model on first use and compiles the numba kernels into their disk cache
    measure(variants[0], "alone", questions, corpus, work, args.model, 1, 0.0)
    rows = []
    for condition in conditions:  # variants side by side within a condition, so a load change hits both
        for variant in variants:
            rows.append(measure(variant, condition, questions, corpus, work, args.model, args.limit, args.settle,
                                args.timeout))
            if args.format == "human":
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    alone = {r["variant"]: r["process_s"] for r in rows if r["condition"] == "alone" and not r.get("timed_out")}
    for row in rows:  # whole process: a second job also slows model loading, which the user waits for too
        if row["variant"] in alone:
            row["ratio_vs_alone"] = round(row["process_s"] / alone[row["variant"]], 2)
    if args.format == "json":
        print(json.dumps({"model": args.model, "limit": args.limit, "cpus": os.cpu_count(), "rows": rows}, indent=2))
        return
    print(f"demo agent run, {args.limit} sample questions, model {args.model}, {os.cpu_count()} CPUs")
    for row in rows:
        more = ">" if row.get("timed_out") else ""
        ratio = f"{more}{row['ratio_vs_alone']:.2f}x alone" if "ratio_vs_alone" in row else ""
        episodes = "stopped" if row.get("timed_out") else f"{row['run_s']:.1f} s"
        threads = f"  threads at end {row['threads_at_end']}" if row.get("threads_at_end") else ""
        print(f"{row['variant']:<10} {row['condition']:<6} process {more}{row['process_s']:7.1f} s  "
              f"(episodes {episodes})  {ratio}{threads}  load {row['load_1m']}")


if __name__ == "__main__":
    main()
