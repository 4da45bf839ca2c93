"""Where a CPU decode step goes: the attention over the cache against everything else, per batch and context.

Issue 51 asks for decode attention to be at most 35 % of a decode step at 2k context, batch 8. This
opens `--batch` sessions of `--context` random tokens each in the engine, prefills them, then times
`--steps` decode steps, and inside them every call of the attention backend's decode path (the numba
kernel, or SDPA with its gather). Reported per (attention backend, batch, context): ms per step, ms of
decode attention per step and per layer, and attention's share of the step. Run alone on the machine,
and name the CPU kind (it is printed). The forward's threads are pinned (`--threads`, default every core):
the engine's own default follows other processes' load, which would let rows of one table differ.

    python -m benchmarks.decode_profile --model default
    python -m benchmarks.decode_profile --model default --batch 1 8 16 --context 512 2048 8192 --attention numba sdpa
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from benchmarks.bench_deterministic import cpu_kind  # one CPU-kind reader for the benchmarks


def profile(model: str, attention: str, batch: int, context: int, steps: int, dtype: str, threads: int) -> dict:
    from engine.core import attention_cpu
    from engine.core.config import EngineConfig
    from engine.core.llm_engine import Engine
    from engine.core.sampling_params import SamplingParams

    tokens_needed = batch * (context + steps + 16)
    # a fixed thread count: the engine's default adapts to other processes' load, which would make rows differ
    engine = Engine.from_pretrained(model, EngineConfig(attention_backend=attention, dtype=dtype, cpu_threads=threads,
                                                        num_kv_blocks=tokens_needed // 16 + batch + 8,
                                                        enable_prefix_caching=False, max_num_batched_tokens=4096))
    layers = engine.adapter.shape.num_layers
    vocab = engine.adapter.shape.vocab_size
    rng = random.Random(0)
    sessions, requests = [], []
    for _ in range(batch):
        session = engine.open_session()
        session.append([rng.randrange(100, vocab - 100) for _ in range(context)])
        sessions.append(session)
    params = SamplingParams(max_new_tokens=steps + 2, ignore_eos=True)
    requests = [session.submit(params) for session in sessions]
    while any(not r.output_token_ids for r in requests):  # prefill (and the first token) outside the timing
        engine.step()
    spent: list[float] = []
    backend_class = type(engine.runner.attention) if hasattr(engine.runner, "attention") else attention_cpu.SdpaBackend
    original = backend_class._decode

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    step_times, attention_times, used = [], [], set()
    backend_class._decode = timed
    try:
        for _ in range(steps):
            spent.clear()
            started = time.perf_counter()
            engine.step()
            step_times.append(time.perf_counter() - started)
            used.add(_threads())
            attention_times.append(sum(spent))
    finally:
        backend_class._decode = original
        for session in sessions:
            session.close()
    step_ms, attention_ms = statistics.median(step_times) * 1e3, statistics.median(attention_times) * 1e3
    return {"attention": attention, "batch": batch, "context": context, "step_ms": round(step_ms, 2),
            "attention_ms": round(attention_ms, 2), "attention_ms_per_layer": round(attention_ms / layers, 3),
            "attention_share": round(attention_ms / step_ms, 3), "layers": layers, "threads": sorted(used)}


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="model (default: the embedded SmolLM2-135M)")
    parser.add_argument("--attention", nargs="+", default=["numba", "sdpa"], help="CPU attention backends")
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 8, 16])
    parser.add_argument("--context", nargs="+", type=int, default=[512, 2048])
    parser.add_argument("--steps", type=int, default=12, help="decode steps timed (the median is reported)")
    parser.add_argument("--dtype", default="auto", help="engine dtype (auto: bf16 on a CPU with native bf16)")
    parser.add_argument("--threads", type=int, default=None, help="forward threads, fixed (default: every core)")
    parser.add_argument("--format", choices=("human", "json"), default="human")
    args = parser.parse_args(argv)
    from engine.core.threads import available_cores

    threads = args.threads or available_cores()
    rows = []
    for attention in args.attention:
        for batch in args.batch:
            for context in args.context:
                print(f"… {attention} batch {batch} context {context}", file=sys.stderr, flush=True)
                rows.append(profile(args.model, attention, batch, context, args.steps, args.dtype, threads))
    result = {"cpu": cpu_kind(), "model": args.model, "dtype": args.dtype, "rows": rows}
    if args.format == "json":
        print(json.dumps(result, indent=1))
        return 0
    used = sorted({count for row in rows for count in row["threads"]})
    print(f"{result['cpu']} · model {args.model} · dtype {args.dtype} · torch threads during the steps: {used}")
    print(f"{'attention':9s} {'batch':>5s} {'context':>7s} {'step ms':>8s} {'attn ms':>8s} {'per layer':>9s} {'share':>6s}")
    for row in rows:
        print(f"{row['attention']:9s} {row['batch']:5d} {row['context']:7d} {row['step_ms']:8.1f} "
              f"{row['attention_ms']:8.1f} {row['attention_ms_per_layer']:9.3f} {100 * row['attention_share']:5.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
