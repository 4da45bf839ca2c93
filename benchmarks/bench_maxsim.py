"""MaxSim: our kernel vs colpali's einsum `score_multi_vector` formula on the same page vectors.

Same code as `dossier bench maxsim` (benchmarks/workloads/maxsim_bench.py). Default: 32 query vectors
x 100 pages x 768 vectors x 128 dims, fp16 storage, CPU. With `--device cuda` the fused Triton
kernel runs instead (>= 5,000 pages recommended) and the line adds the fraction of HBM bandwidth.

Usage:
    .venv/bin/python benchmarks/bench_maxsim.py [--pages 100] [--dtype float16] [--device cpu]
        [--hbm-gbs 4800]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workloads.maxsim_bench import run_maxsim_bench  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--vectors", type=int, default=768)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--query-vectors", type=int, default=32)
    parser.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16", "int8"])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hbm-gbs", type=float, default=4800.0, help="peak memory bandwidth, GB/s (H200: 4800)")
    args = parser.parse_args()
    result = run_maxsim_bench(pages=args.pages, vectors=args.vectors, dim=args.dim, query_vectors=args.query_vectors,
                              dtype=args.dtype, repeats=args.repeats, device=args.device)
    if args.device.startswith("cuda"):
        gbs = result["page_bytes"] / (result["p50_ms_ours"] / 1000) / 1e9
        result["achieved_gbs"] = round(gbs, 1)
        result["fraction_of_hbm"] = round(gbs / args.hbm_gbs, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
