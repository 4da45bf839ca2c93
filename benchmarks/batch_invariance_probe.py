"""Which CPU matrix products give a row the same bits whatever else is in the batch (issue 48's first question).

A batch-invariant engine needs every linear layer to compute a sequence's row with one fixed reduction
order, however many rows share the call. This probe measures, on this machine, for the linear shapes of a
model (SmolLM2-135M's and Qwen2.5-1.5B's by default) and each dtype:

1. plain `F.linear`: is each row of an M-row call bit-equal to the same row in a 16-row call, for M from 16 to
   2048? (oneDNN/MKL change blocking and K-splitting with M: no, in general);
2. fixed tiles: the rows cut into tiles of exactly T rows (the last one zero-padded), one call per tile: is a
   row's result the same at any position in any tile, with 2 threads and with 1?
3. what the tiles cost: microseconds per call for M = 1, 8 and 512 rows, plain and tiled.

    python -m benchmarks.batch_invariance_probe
    python -m benchmarks.batch_invariance_probe --dtypes float32 --tiles 16 64 --format json

Read the answers with the CPU kind (/proc/cpuinfo): AVX2 and AVX-512/AMX machines take different kernels.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

SHAPES = {"smollm2-135m": [(576, 1536), (1536, 576), (576, 49152)],
          "qwen2.5-1.5b": [(1536, 8960), (8960, 1536), (1536, 1536), (1536, 151936)]}
ROWS = (16, 17, 33, 64, 100, 257, 513, 1024, 2048)


def _tiled(x, weight, tile: int):
    import torch
    import torch.nn.functional as F

    rows = x.shape[0]
    pad = (-rows) % tile
    if pad:
        x = torch.cat([x, x.new_zeros(pad, x.shape[1])])
    return torch.cat([F.linear(x[i:i + tile], weight) for i in range(0, x.shape[0], tile)])[:rows]


def plain_invariant(weight, x) -> list[int]:
    """The row counts M at which some row of an M-row call differs from the same row in a 16-row call."""
    import torch.nn.functional as F

    varying = []
    for rows in ROWS:
        out = F.linear(x[:rows], weight)
        for r in range(0, rows, max(1, rows // 5)):
            if not (out[r] == F.linear(x[r:r + 16], weight)[0]).all():
                varying.append(rows)
                break
    return varying


def tile_invariant(weight, x, tile: int, threads: tuple[int, ...]) -> dict[int, bool]:
    """Per thread count: each row's tiled result equal at any offset, and alone, to the 2-thread reference."""
    import torch

    torch.set_num_threads(threads[0])
    reference = _tiled(x[:tile], weight, tile)
    result = {}
    for count in threads:
        torch.set_num_threads(count)
        same = True
        for shift in (0, 3, tile - 1):
            shifted = torch.cat([torch.randn(shift, x.shape[1], dtype=x.dtype), x[:tile]])
            same &= torch.equal(_tiled(shifted, weight, tile)[shift:], reference)
        same &= torch.equal(_tiled(x[5:6], weight, tile)[0], reference[5])
        result[count] = bool(same)
    torch.set_num_threads(threads[0])
    return result


def _micros(fn, seconds: float = 0.2) -> float:
    for _ in range(3):
        fn()
    started, calls = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - started) / calls * 1e6


def cost(weight, k: int, tiles: tuple[int, ...]) -> dict[str, dict[str, float]]:
    import torch
    import torch.nn.functional as F

    out = {}
    for rows in (1, 8, 512):
        x = torch.randn(rows, k, dtype=weight.dtype)
        row = {"plain": round(_micros(lambda: F.linear(x, weight)), 1)}
        for tile in tiles:
            row[f"T{tile}"] = round(_micros(lambda t=tile: _tiled(x, weight, t)), 1)
        out[f"M={rows}"] = row
    return out


def run(models: list[str], dtypes: list[str], tiles: tuple[int, ...], threads: tuple[int, ...]) -> dict:
    import torch

    torch.manual_seed(0)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
    kind = "AVX-512 bf16 + AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    rows = []
    for model in models:
        for k, n in SHAPES[model]:
            for dtype_name in dtypes:
                dtype = getattr(torch, dtype_name)
                weight = torch.randn(n, k, dtype=dtype) / k ** 0.5
                x = torch.randn(max(ROWS) + 32, k, dtype=dtype)
                print(f"… {model} {k}x{n} {dtype_name}", file=sys.stderr, flush=True)
                rows.append({"model": model, "in": k, "out": n, "dtype": dtype_name,
                             "plain_varies_at_rows": plain_invariant(weight, x),
                             "tiles_invariant": {str(t): tile_invariant(weight, x, t, threads) for t in tiles},
                             "microseconds": cost(weight, k, tiles)})
    return {"cpu": cpu, "cpu_kind": kind, "threads": list(threads), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--tiles", nargs="+", type=int, default=[16, 64], help="tile heights T to try")
    parser.add_argument("--threads", nargs="+", type=int, default=[2, 1], help="thread counts (the first is the "
                                                                               "reference)")
    parser.add_argument("--format", choices=("human", "json"), default="human")
    args = parser.parse_args(argv)
    result = run(args.models, args.dtypes, tuple(args.tiles), tuple(args.threads))
    if args.format == "json":
        print(json.dumps(result, indent=1))
        return 0
    print(f"CPU: {result['cpu']} ({result['cpu_kind']}); threads tried {result['threads']}")
    for row in result["rows"]:
        tiles = "; ".join(f"T={t}: " + ", ".join(f"{c} thr {'same' if ok else 'DIFFERS'}" for c, ok in per.items())
                          for t, per in row["tiles_invariant"].items())
        varies = row["plain_varies_at_rows"]
        costs = " ".join(f"{m} " + "/".join(f"{v:.0f}" for v in c.values()) for m, c in row["microseconds"].items())
        print(f"{row['model']:13s} {row['in']:>5}x{row['out']:<6} {row['dtype']:8s} plain: "
              f"{'row-invariant' if not varies else 'varies at M=' + ','.join(map(str, varies))} | tiles: {tiles} | "
              f"us plain/{'/'.join('T' + str(t) for t in args.tiles)}: {costs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
