"""Engine throughput at real model shapes with random weights: prefill and decode tok/s per batch size (GPU).

For each batch size B: B fresh sessions append a P-token prompt of random ids; the timed prefill
runs until every session has its first token (chunked by the step token budget); then every session
generates D more tokens (greedy, end-of-sequence ignored) and that decode phase is timed twice, with
the CUDA graphs the engine captured and with them detached (eager), so the graphs' gain is its own
figure. Each phase ends on a device synchronisation; tok/s = tokens / seconds. One warm-up round at
the largest batch first compiles the kernel variants.

    python -m benchmarks.gpu_throughput --model llama-1b --batches 1 16 64 --out llama-1b.json

Shapes: `models/loading.py` (llama-1b, llama-3b) and `models/vision_language/loading.py` (qwen2.5-vl-7b:
its language model, text-only turns). Run by scripts/gpu_check.sh.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch

from engine.core.config import EngineConfig
from engine.core.llm_engine import Engine
from engine.core.sampling_params import SamplingParams

__all__ = ["measure"]


def _synchronize(engine: Engine) -> None:
    if engine.runner.device.type == "cuda":
        torch.cuda.synchronize()


def _round(engine: Engine, batch: int, prompt: int, decode: int, seed: int) -> dict:
    rng = random.Random(seed)
    vocab = min(engine.adapter.shape.vocab_size, 32000)
    sessions = [engine.open_session() for _ in range(batch)]
    for session in sessions:
        session.append([rng.randrange(10, vocab) for _ in range(prompt)])
        session.submit(SamplingParams(max_new_tokens=1, ignore_eos=True))
    _synchronize(engine)
    started = time.perf_counter()
    engine.run_until_idle()
    _synchronize(engine)
    prefill_s = time.perf_counter() - started
    result = {"batch": batch, "prompt_tokens": prompt, "prefill_tok_s": round(batch * prompt / prefill_s, 1)}
    graphs = engine.runner.graphs
    for label, use_graphs in (("graphs", True), ("eager", False)):
        if use_graphs and graphs is None:
            continue
        engine.runner.graphs = graphs if use_graphs else None
        for session in sessions:
            session.submit(SamplingParams(max_new_tokens=decode, ignore_eos=True))
        _synchronize(engine)
        started = time.perf_counter()
        engine.run_until_idle()
        _synchronize(engine)
        result[f"decode_tok_s_{label}"] = round(batch * decode / (time.perf_counter() - started), 1)
    engine.runner.graphs = graphs
    for session in sessions:
        session.close()
    return result


def measure(model: str, batches: list[int], prompt: int = 512, decode: int = 64, kv_cache_gib: float | None = None,
            attention: str = "auto", progress=None) -> dict:
    """Prefill and decode tok/s of `model` (a random-weight shape) at each batch size, bf16 on CUDA; the KV pool
    sized from free memory unless `kv_cache_gib` is given (its tokens are recorded)."""
    say = progress or (lambda _msg: None)
    config = EngineConfig(device="cuda", dtype="bfloat16", kv_cache_gib=kv_cache_gib, attention_backend=attention,
                          max_num_seqs=max(batches), max_num_batched_tokens=8192,
                          cuda_graph_max_batch=max(batches))
    started = time.perf_counter()
    engine = Engine.from_pretrained(model, config)
    load_s = time.perf_counter() - started
    say(f"{model}: loaded and captured in {load_s:.1f} s ({engine.stats()['attention_backend']})")
    _round(engine, max(batches), 64, 4, seed=0)  # warm-up: kernel variants compiled outside the timings
    rows = []
    for batch in batches:
        rows.append(_round(engine, batch, prompt, decode, seed=batch))
        say(f"{model}: {rows[-1]}")
    return {"model": model, "attention_backend": engine.stats()["attention_backend"],
            "cuda_graphs": engine.runner.graphs is not None, "load_and_capture_s": round(load_s, 1),
            "kv_pool": engine.pool_line(), "kv_pool_tokens": engine.runner.num_blocks * engine.config.block_size,
            "decode_tokens": decode, "rows": rows,
            "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-1b")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens per session")
    parser.add_argument("--decode", type=int, default=64, help="tokens generated per session in the decode phase")
    parser.add_argument("--attention", default="auto")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    result = measure(args.model, args.batches, args.prompt, args.decode, attention=args.attention,
                     progress=lambda msg: print(msg, flush=True))
    text = json.dumps(result)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
