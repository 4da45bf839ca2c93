"""Does the batch-invariant mode give the same answers on another CPU kind? (issue 48: "by how much")

The mode fixes a row's bits on one machine; across CPU kinds (AVX2 vs AVX-512/AMX) the float32 kernels
differ. This probe runs fixed prompts greedily in the mode and writes what a second machine must match:
the generated tokens, a SHA-256 of every sampled logits row (same bits or not) and each row's top 8 logits
(how far apart). Run it on one machine, carry the JSON to the other (or commit it), run it there, compare:

    python -m benchmarks.cross_cpu_probe --model qwen2.5-1.5b --dtype float32 --quantization int8 --out a.json
    python -m benchmarks.cross_cpu_probe --compare a.json b.json

On one machine, a CPU's AVX2 code paths can be forced to approximate an AVX2 machine (FBGEMM has no switch,
but its int8 sums are exact; an AMD CPU also differs in MKL's code paths and libm):

    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 NUMBA_CPU_NAME=haswell \\
    NUMBA_CPU_FEATURES=+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,-avx512f python -m benchmarks.cross_cpu_probe ...

The JSON names the CPU (model name and flags) and the torch build; compare only what you label.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import sys

PROMPT_LENGTHS = (64, 200, 333, 500)
NEW_TOKENS = 24
TOP = 8


def _cpu() -> dict:
    try:
        info = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return {"model": platform.processor(), "flags": []}
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return {"model": model, "flags": sorted(f for f in flags if f.startswith(("avx", "amx", "fma")))}


def probe(model: str, dtype: str, quantization: str | None, threads: int) -> dict:
    """Greedy tokens and per-row logits fingerprints of the fixed prompts, in the deterministic mode."""
    import os

    import torch

    from engine import Engine, EngineConfig, SamplingParams

    engine = Engine.from_pretrained(model, EngineConfig(dtype=dtype, quantization=quantization, deterministic=True,
                                                        cpu_threads=threads, kv_cache_gib=2))
    rows: dict = {}
    run = engine.runner.run

    def recording(chunks):
        logits = run(chunks)
        for chunk, row in zip([c for c in chunks if c.samples], logits):
            rows[(id(chunk.request), chunk.start + chunk.length)] = row.float().clone()
        return logits

    engine.runner.run = recording
    rng = random.Random(48)
    requests = []
    for n in PROMPT_LENGTHS:
        session = engine.open_session()
        session.append([rng.randrange(100, 30000) for _ in range(n)])
        requests.append(engine.submit(session, SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)))
    while any(not r.finished for r in requests):
        engine.step()
    sequences = []
    for request in requests:
        mine = [rows[key] for key in sorted(k for k in rows if k[0] == id(request))]
        sequences.append({
            "tokens": list(request.output_token_ids),
            "sha256": [hashlib.sha256(row.numpy().tobytes()).hexdigest()[:16] for row in mine],
            "top": [[[int(i), float(v)] for v, i in zip(*torch.topk(row, TOP))] for row in mine]})
    env = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA",
                                      "NUMBA_CPU_NAME") if k in os.environ}
    return {"model": model, "dtype": dtype, "quantization": quantization, "threads": threads, "cpu": _cpu(),
            "aten_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__, "env": env,
            "prompt_lengths": list(PROMPT_LENGTHS), "new_tokens": NEW_TOKENS, "sequences": sequences}


def compare(a: dict, b: dict) -> dict:
    """Tokens identical, logits rows bit-equal, and the largest difference among the rows' shared top logits."""
    for key in ("model", "dtype", "quantization", "prompt_lengths", "new_tokens"):
        if a.get(key) != b.get(key):
            raise SystemExit(f"cross_cpu_probe: the two files differ in {key} ({a.get(key)!r} vs {b.get(key)!r}); "
                             "compare runs of the same model, dtype and prompts")
    same_tokens = rows = equal = 0
    largest = 0.0
    firsts = []
    for sa, sb in zip(a["sequences"], b["sequences"]):
        same_tokens += sa["tokens"] == sb["tokens"]
        firsts.append(next((i for i, (x, y) in enumerate(zip(sa["tokens"], sb["tokens"])) if x != y), None))
        for ha, hb, ta, tb in zip(sa["sha256"], sb["sha256"], sa["top"], sb["top"]):
            rows += 1
            equal += ha == hb
            tb_by_id = dict((i, v) for i, v in tb)
            largest = max([largest] + [abs(v - tb_by_id[i]) for i, v in ta if i in tb_by_id])
    return {"sequences": len(a["sequences"]), "tokens_identical": same_tokens, "first_differing_step": firsts, "logits_rows": rows, "rows_bit_equal": equal,
            "largest_top_logit_difference": largest,
            "a": {"cpu": a["cpu"]["model"], "aten": a["aten_capability"], "env": a["env"]},
            "b": {"cpu": b["cpu"]["model"], "aten": b["aten_capability"], "env": b["env"]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="float32", help="float32 or bfloat16 (bf16 needs avx512_bf16 to be fast)")
    parser.add_argument("--quantization", default=None, help="int8 or int4")
    parser.add_argument("--threads", type=int, default=1, help="keep it the same on both machines")
    parser.add_argument("--out", help="write the probe's JSON here")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two probe files; run nothing")
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.load(open(path, encoding="utf-8")) for path in args.compare)
        result = compare(a, b)
        print(json.dumps(result, indent=2))
        return 0
    result = probe(args.model, args.dtype, args.quantization, args.threads)
    text = json.dumps(result)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(f"{args.model} {args.dtype}{'+' + args.quantization if args.quantization else ''}: "
          f"{len(result['sequences'])} sequences, aten {result['aten_capability']}, cpu {result['cpu']['model']}"
          + (f"; wrote {args.out}" if args.out else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
