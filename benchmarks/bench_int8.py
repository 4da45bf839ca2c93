"""CPU int8 linears: FBGEMM alone (the peer, what --quantization int8 ran before) against our dispatch, same run.

`models.int_linear.Int8DynamicLinear` packs its int8 weights for FBGEMM (AVX-512 VNNI) and, on CPUs
with AMX int8 tiles, for oneDNN too; steps of `INT8_WIDE_ROWS` rows or more take oneDNN. Two tables:

1. Kernels: one decoder layer's four linears at a model's shapes (Qwen2.5-1.5B by default: qkv,
   o, gate_up, down), rows = tokens in a step, median of repeats after a warm-up, same threads.
2. With `--model`: the engine's prefill of one fresh random prompt of `--prompt` tokens (chunks of
   the engine's `max_num_batched_tokens`), the same loaded model with the oneDNN copies dropped (the
   peer) and kept (ours), alternating, median of `--repeats`. The prompts differ per run so no
   cached prefix is reused.
3. With `--mlp`: one decoder MLP block in int8 (gate_up, SiLU(gate) * up, down) at each row count, as
   it ran before it worked in place (the peer: new tensors for the scale, the SiLU and the product)
   and as `DecoderLayer.mlp` runs it now, alternating, median of repeats; the outputs are checked
   bitwise equal first.

    .venv/bin/python benchmarks/bench_int8.py --threads 2
    .venv/bin/python benchmarks/bench_int8.py --threads 2 --model qwen2.5-1.5b --prompt 4096 --repeats 2
    .venv/bin/python benchmarks/bench_int8.py --threads 2 --mlp --rows 16,128,512,2048 --repeats 9
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from torch import nn


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _kernels(args) -> None:
    from models.int_linear import Int8DynamicLinear

    hidden, inter, heads, kv_heads, dim = args.hidden, args.intermediate, args.heads, args.kv_heads, args.head_dim
    shapes = [((heads + 2 * kv_heads) * dim, hidden), (hidden, heads * dim), (2 * inter, hidden), (hidden, inter)]
    layers = [Int8DynamicLinear(nn.Linear(k, n, bias=False), wide=True) for n, k in shapes]
    print(f"one layer's linears {', '.join(f'{n}x{k}' for n, k in shapes)}; median of {args.repeats}")
    print("| rows | FBGEMM (peer) | ours | ours vs peer |")
    print("|---|---|---|---|")
    for rows in (int(r) for r in args.rows.split(",")):
        inputs = [torch.randn(rows, k) for _, k in shapes]
        ours = _median_seconds(lambda: [layer(x) for layer, x in zip(layers, inputs)], args.repeats)
        wide = [layer._wide for layer in layers]
        for layer in layers:
            layer._wide = None
        peer = _median_seconds(lambda: [layer(x) for layer, x in zip(layers, inputs)], args.repeats)
        for layer, packed in zip(layers, wide):
            layer._wide = packed
        print(f"| {rows} | {peer * 1e3:.2f} ms | {ours * 1e3:.2f} ms | {peer / ours:.2f}x |", flush=True)


def _engine(args) -> None:
    from engine import Engine, EngineConfig, SamplingParams
    from models.int_linear import Int8DynamicLinear

    engine = Engine.from_pretrained(args.model, EngineConfig(quantization="int8", dtype="float32",
                                                             cpu_threads=args.threads))
    layers = [m for m in engine.adapter.modules() if isinstance(m, Int8DynamicLinear)]
    wide = [layer._wide for layer in layers]
    if any(packed is None for packed in wide):
        raise SystemExit("bench_int8: this CPU has no AMX int8 (or torch no oneDNN): the engine runs FBGEMM only")
    vocab = engine.adapter.shape.vocab_size
    rng = random.Random(0)

    def prefill() -> None:
        with engine.open_session() as session:
            session.append([rng.randrange(1000, vocab - 1000) for _ in range(args.prompt)])
            session.generate(SamplingParams(max_new_tokens=1, ignore_eos=True))

    prefill()  # warm-up
    times = {"peer": [], "ours": []}
    for _ in range(args.repeats):
        for name in ("peer", "ours"):
            for layer, packed in zip(layers, wide):
                layer._wide = None if name == "peer" else packed
            start = time.perf_counter()
            prefill()
            times[name].append(time.perf_counter() - start)
    peer, ours = statistics.median(times["peer"]), statistics.median(times["ours"])
    print(f"engine prefill, {args.model} int8 float32, {args.prompt}-token prompt, chunks of "
          f"{engine.config.max_num_batched_tokens}, median of {args.repeats}: FBGEMM (peer) {peer:.1f} s "
          f"({args.prompt / peer:.1f} tok/s), ours {ours:.1f} s ({args.prompt / ours:.1f} tok/s), "
          f"ours vs peer {peer / ours:.2f}x")


def _mlp(args) -> None:
    import torch.nn.functional as F

    from models.decoder import DecoderLayer, LayerSpec
    from models.int_linear import Int8DynamicLinear

    spec = LayerSpec(hidden=args.hidden, intermediate=args.intermediate, heads=args.heads, kv_heads=args.kv_heads,
                     head_dim=args.head_dim, eps=1e-6)
    layer = DecoderLayer(spec, 0)
    layer.gate_up_proj = Int8DynamicLinear(layer.gate_up_proj, wide=False)  # FBGEMM in both: the kernel is not timed
    layer.down_proj = Int8DynamicLinear(layer.down_proj, wide=False)

    def copying(linear, x):  # Int8DynamicLinear.forward before it scaled in place
        peak = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6)
        return torch.ops.quantized.linear_dynamic(x / peak, linear._packed, True) * peak

    def peer(x):
        gate, up = copying(layer.gate_up_proj, x).split(spec.intermediate, -1)
        return copying(layer.down_proj, F.silu(gate) * up)

    print(f"one int8 MLP block {args.hidden} -> 2x{args.intermediate} -> {args.hidden}; median of {args.repeats}, "
          "alternating")
    print("| rows | copying (peer) | in place (ours) | ours vs peer |")
    print("|---|---|---|---|")
    with torch.inference_mode():
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(rows, args.hidden)
            if not torch.equal(peer(x), layer.mlp(x)):
                raise SystemExit(f"bench_int8: the in-place MLP differs from the copying one at {rows} rows")
            times = {"peer": [], "ours": []}
            for _ in range(args.repeats):
                for name, fn in (("peer", peer), ("ours", layer.mlp)):
                    times[name].append(_median_seconds(lambda: fn(x), 1))
            peer_s, ours_s = statistics.median(times["peer"]), statistics.median(times["ours"])
            print(f"| {rows} | {peer_s * 1e3:.2f} ms | {ours_s * 1e3:.2f} ms | {peer_s / ours_s:.2f}x |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--rows", default="1,16,32,64,128,512,2048", help="rows per step, comma-separated")
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--intermediate", type=int, default=8960)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default=None, help="also time the engine's prefill with this model (e.g. qwen2.5-1.5b)")
    parser.add_argument("--prompt", type=int, default=4096, help="prompt tokens for --model")
    parser.add_argument("--mlp", action="store_true", help="only the MLP block, in place against copying")
    args = parser.parse_args()
    from models.int_linear import amx_int8

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, AMX int8: {amx_int8()}")
    if args.mlp:
        return _mlp(args)
    _kernels(args)
    if args.model:
        _engine(args)


if __name__ == "__main__":
    main()
