"""Dossier's engine vs a naive Hugging Face `generate` loop on an agent-like workload.

Same code as `dossier bench engine` (benchmarks/engine_sessions.py): S sessions x T turns, each
turn appends ~N tokens of tool output and generates a fixed number of tokens; Dossier
keeps every session's KV cache and batches all sessions, the naive loop re-sends each
session's whole history to `generate`. Prints one comparable line on stderr and the
figures as JSON on stdout (`speedup_vs_naive`, `cache_reuse_fraction`, prefill/decode
tok/s, `outputs_match`, counters).

Usage:
    .venv/bin/python benchmarks/bench_engine.py [--model default] [--sessions 32] [--turns 6]
        [--naive-sessions 4] [--threads N] [--vllm]
    .venv/bin/python benchmarks/bench_engine.py --model llama-1b --naive-sessions 32 --vllm   # on a GPU
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.engine_sessions import Workload, run_benchmark  # noqa: E402
from engine.core.config import EngineConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="default, a local model, or llama-tiny/llama-1b/llama-3b")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--tool-tokens", type=int, default=300)
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--naive-sessions", type=int, default=4, help="0 = run the naive loop on every session")
    parser.add_argument("--kv-cache-gib", type=float, default=4.0)
    parser.add_argument("--max-batched-tokens", type=int, default=2048)
    parser.add_argument("--attention", default="auto", help="auto, triton, flash_attn (GPU), numba or sdpa (CPU)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vllm", action="store_true", help="also run vLLM with prefix caching (GPU)")
    args = parser.parse_args()
    if args.threads:
        from engine.core.threads import set_torch_threads

        set_torch_threads(args.threads)
    workload = Workload(args.sessions, args.turns, args.tool_tokens, args.new_tokens, args.seed)
    config = EngineConfig(
        kv_cache_gib=args.kv_cache_gib, max_num_batched_tokens=args.max_batched_tokens,
        attention_backend=args.attention, block_size=args.block_size, dtype=args.dtype,
    )
    result = run_benchmark(
        args.model, workload, config, naive_sessions=args.naive_sessions or None, with_vllm=args.vllm,
        progress=lambda msg: print(f"... {msg}", file=sys.stderr),
    )
    print(
        f"dossier {result['dossier_s']:.1f} s  naive {result['naive_s']:.1f} s  "
        f"speedup {result['speedup_vs_naive']:.2f}x  reuse {result['cache_reuse_fraction']:.3f}  "
        f"match {result['outputs_match']}",
        file=sys.stderr,
    )
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
