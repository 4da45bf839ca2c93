"""Host work of one decode step as the batch and its contexts grow: the step's layout and the graph buffers' load.

On a GPU a 7B decode step at batch 64 takes ~10 ms; the host must prepare the next step in far less. This times
what the host does per decode step, with no model: `build_layout` over B sequences of C tokens each (their
block tables included) and, as a CUDA-graph step does, padding it into the static buffers' bucket (on the CPU).

    python -m benchmarks.bench_step_layout                     # 16x4k, 64x16k, 128x32k
    python -m benchmarks.bench_step_layout --shapes 64x16384 --repeats 50

Prints one line per shape: the median milliseconds of the layout and of the graph load, over `--repeats` steps.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import numpy as np

from engine.core.scheduler import Chunk
from engine.core.sequence import Sequence
from engine.core.step_layout import build_layout

BLOCK_SIZE = 16


def _sequences(batch: int, context: int) -> list[Sequence]:
    sequences = []
    for i in range(batch):
        seq = Sequence(i, BLOCK_SIZE)
        seq.append(list(range(context)), np.arange(context, dtype=np.int32), context)
        for block in range(-(-(context + 1) // BLOCK_SIZE)):
            seq.block_table.append(i * 100_000 + block)
        seq.num_computed_tokens = context - 1
        sequences.append(seq)
    return sequences


def measure(batch: int, context: int, repeats: int) -> dict:
    sequences = _sequences(batch, context)
    chunks = [Chunk(SimpleNamespace(seq=seq), context - 1, 1, True) for seq in sequences]
    layout_ms, load_ms = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        layout = build_layout(chunks, BLOCK_SIZE)
        middle = time.perf_counter()
        bucket, width = batch, -(-(context + 1) // BLOCK_SIZE)
        tables = np.full((bucket, width), 0, dtype=np.int32)  # what DecodeGraphs._load pads into its buffers
        tables[:batch, : layout.block_tables.shape[1]] = layout.block_tables
        done = time.perf_counter()
        layout_ms.append((middle - started) * 1000)
        load_ms.append((done - middle) * 1000)
    return {"batch": batch, "context": context, "layout_ms": round(statistics.median(layout_ms), 3),
            "graph_load_ms": round(statistics.median(load_ms), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["16x4096", "64x16384", "128x32768"], help="BATCHxCONTEXT")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    for shape in args.shapes:
        batch, context = (int(x) for x in shape.split("x"))
        row = measure(batch, context, args.repeats)
        print(f"{batch:4d} x {context:6d}: layout {row['layout_ms']:8.3f} ms  graph load {row['graph_load_ms']:7.3f} ms")


if __name__ == "__main__":
    main()
