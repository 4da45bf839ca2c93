"""BM25 top-k: our Numba kernel vs bm25s's Numba backend on one synthetic 1M-page score matrix.

Same code as `dossier bench bm25` (benchmarks/workloads/bm25_bench.py): seed, warm up, time both on
the same matrix and queries (interleaved, best of N), check parity, print one JSON line with
`qps_ratio_vs_bm25s`, `topk_identical` and the 1M/100k per-query time ratios.

Usage:
    .venv/bin/python benchmarks/bench_bm25.py [--docs 1000000] [--small-docs 100000] [--queries 1000] [--gpu]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workloads.bm25_bench import run_bm25_bench  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--small-docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gpu", action="store_true", help="also time the Triton backend (needs CUDA)")
    args = parser.parse_args()
    result = run_bm25_bench(num_docs=args.docs, small_docs=args.small_docs, n_queries=args.queries, k=args.k,
                            seed=args.seed, repeats=args.repeats, log=lambda m: print(m, file=sys.stderr))
    if args.gpu:
        from benchmarks.workloads.bm25_bench import run_bm25_gpu_bench

        result["gpu"] = run_bm25_gpu_bench(num_docs=args.docs, k=args.k, seed=args.seed,
                                           log=lambda m: print(m, file=sys.stderr))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
