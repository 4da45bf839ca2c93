"""What the batch-invariant mode (`EngineConfig.deterministic`, issue 48) costs: the same agent-like workload, mode off and on.

One model is loaded once and driven by two engines, one per mode, taking turns (off, on, off, on, ...)
so slow drift of a shared machine's load falls on both. The workload is `dossier bench engine`'s
(benchmarks/engine_sessions.py): S sessions x T turns, each turn appending ~N tokens of tool output
and generating a fixed number of tokens. Prints one line per mode on stderr (the best of the repeats:
seconds, prefill and decode time) and the ratio, and the figures as JSON on stdout. On a shared CPU
read the ratio, not the seconds, and name the CPU kind (printed).

    python -m benchmarks.bench_deterministic [--model default] [--sessions 8] [--turns 3] [--repeats 2]
    python -m benchmarks.bench_deterministic --dtype float32 --quantization int8
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys


def cpu_kind() -> str:
    """The CPU model and which of AVX2 / AVX-512 / AVX-512 bf16 + AMX it has (the kernels differ by kind)."""
    try:
        lines = open("/proc/cpuinfo").read().splitlines()
    except OSError:
        return "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?")
    flags = next((line for line in lines if line.startswith("flags")), "")
    kind = ("AVX-512 bf16 + AMX" if "amx_tile" in flags else "AVX-512 bf16" if "avx512_bf16" in flags
            else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2")
    return f"{name} ({kind})"


def run_once(engine, workload) -> dict:
    """The workload on fresh sessions of `engine`: wall seconds and the engine's prefill/decode split."""
    import time

    from benchmarks.engine_sessions import EngineLoop, build_plan

    before = dict(engine.phases)
    loop = EngineLoop(engine, workload, build_plan(engine, workload))
    started = time.perf_counter()
    for turn in range(workload.turns):
        loop.run_turn(turn)
    seconds = time.perf_counter() - started
    outputs = loop.outputs
    loop.close()
    phases = {k: engine.phases[k] - before[k] for k in ("prefill_time_s", "decode_time_s", "decode_tokens")}
    return {"seconds": seconds, **phases, "outputs": outputs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tool-tokens", type=int, default=300)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2, help="runs per mode, alternating; the best is reported")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization", default=None)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of both modes (the mode fixes the count)")
    parser.add_argument("--kv-cache-gib", type=float, default=2.0)
    args = parser.parse_args(argv)

    from benchmarks.engine_sessions import Workload, _warm_up
    from engine.core.config import EngineConfig
    from engine.core.llm_engine import Engine

    workload = Workload(args.sessions, args.turns, args.tool_tokens, args.new_tokens, seed=0)
    base = dict(kv_cache_gib=args.kv_cache_gib, dtype=args.dtype, quantization=args.quantization,
                cpu_threads=args.threads)
    default = Engine.from_pretrained(args.model, EngineConfig(**base))
    deterministic = Engine(default.adapter, EngineConfig(**base, deterministic=True))
    engines = {"default": default, "deterministic": deterministic}
    for engine in engines.values():
        _warm_up(engine)
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    for _ in range(args.repeats):
        for name, engine in engines.items():
            runs[name].append(run_once(engine, workload))
            print(f"... {name}: {runs[name][-1]['seconds']:.1f} s", file=sys.stderr)
    best = {name: min(results, key=lambda r: r["seconds"]) for name, results in runs.items()}
    same = all(r["outputs"] == runs["deterministic"][0]["outputs"] for r in runs["deterministic"])
    result = {
        "cpu": cpu_kind(), "model": args.model, "dtype": str(default.runner.dtype).removeprefix("torch."),
        "quantization": args.quantization, "threads": args.threads,
        "workload": dataclasses.asdict(workload),
        **{name: {k: round(v, 3) for k, v in r.items() if k != "outputs"} for name, r in best.items()},
        "ratio_seconds": round(best["deterministic"]["seconds"] / best["default"]["seconds"], 2),
        "ratio_prefill": round(best["deterministic"]["prefill_time_s"] / max(best["default"]["prefill_time_s"], 1e-9), 2),
        "ratio_decode": round(best["deterministic"]["decode_time_s"] / max(best["default"]["decode_time_s"], 1e-9), 2),
        "deterministic_repeats_identical": same,
        "deterministic_equals_default_outputs": best["deterministic"]["outputs"] == best["default"]["outputs"],
    }
    print(f"CPU: {result['cpu']}; {args.model} {result['dtype']}{' ' + args.quantization if args.quantization else ''}, "
          f"{args.threads} threads, {args.sessions} sessions x {args.turns} turns", file=sys.stderr)
    for name in engines:
        r = result[name]
        print(f"{name:13s} {r['seconds']:.2f} s (prefill {r['prefill_time_s']:.2f} s, decode {r['decode_time_s']:.2f} s)",
              file=sys.stderr)
    print(f"deterministic / default: {result['ratio_seconds']}x overall, {result['ratio_prefill']}x prefill, "
          f"{result['ratio_decode']}x decode; deterministic repeats identical: {same}", file=sys.stderr)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
