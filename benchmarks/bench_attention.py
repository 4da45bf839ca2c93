"""CPU continued-prefill attention: our unmasked split against torch SDPA with the causal mask, same run.

A prefill chunk that follows cached context (every agent turn after the first) attends to the cached
keys and to itself causally. The peer is what HF transformers and our engine did before: one
`scaled_dot_product_attention` call with the (length, kv_len) boolean mask and `enable_gqa`. Ours is
`engine.core.attention_cpu._continued_prefill`: the cached part unmasked with queries grouped per KV
head, the chunk's own part causal, merged by log-sum-exps. Both are warmed up and run on the same
threads and inputs; the figure is the ratio of medians, with the largest difference between outputs.

In bf16 on a CPU with AVX512-BF16 and no AMX the engine takes `kernels/prefill_attention_bf16.py` instead
(`vdpbf16ps` dot products): its columns compare it with the flash split above, the stronger of the two peers.

    .venv/bin/python benchmarks/bench_attention.py --threads 2
    .venv/bin/python benchmarks/bench_attention.py --threads 2 --heads 9 --kv-heads 3 --head-dim 64 \
        --shapes 90@1500,90@4096,512@4096   # SmolLM2's heads, serve turns
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    from engine.core.attention_cpu import _FLASH, _continued_prefill
    from kernels import prefill_attention_bf16

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--heads", type=int, default=12, help="query heads (Qwen2.5-1.5B: 12)")
    parser.add_argument("--kv-heads", type=int, default=2, help="KV heads (Qwen2.5-1.5B: 2)")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--shapes", default="64@4096,512@4096,64@16384,512@16384,2048@16384",
                        help="chunk@context pairs, comma-separated")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if _FLASH is None:
        raise SystemExit("bench_attention: this torch has no _scaled_dot_product_flash_attention_for_cpu; "
                         "the engine uses masked SDPA here, so there is nothing to compare")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    group = args.heads // args.kv_heads
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.dtype}, {args.heads} query heads "
          f"on {args.kv_heads} KV heads, head dim {args.head_dim}, median of {args.repeats}")
    kernel = dtype == torch.bfloat16 and prefill_attention_bf16.available() and args.head_dim % 64 == 0
    extra = " bf16 kernel | kernel vs split | kernel max |difference| |" if kernel else ""
    print("| chunk | context | masked SDPA (peer) | split (ours) | split vs peer | max |difference| |" + extra)
    print("|---|---|---|---|---|---|" + ("---|---|---|" if kernel else ""))
    g = torch.Generator().manual_seed(0)
    for shape in args.shapes.split(","):
        length, kv_len = (int(x) for x in shape.split("@"))
        q = torch.randn(args.heads, length, args.head_dim, generator=g).to(dtype)
        k = torch.randn(args.kv_heads, kv_len, args.head_dim, generator=g).to(dtype)
        v = torch.randn(args.kv_heads, kv_len, args.head_dim, generator=g).to(dtype)
        mask = torch.arange(kv_len)[None] <= torch.arange(kv_len - length, kv_len)[:, None]

        def peer():
            return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask,
                                                  enable_gqa=group > 1)[0]

        def ours():
            return _continued_prefill(q, k, v)

        diff = (peer().float() - ours().float()).abs().max().item()
        theirs, mine = _median_seconds(peer, args.repeats), _median_seconds(ours, args.repeats)
        row = (f"| {length} | {kv_len} | {theirs * 1e3:.2f} ms | {mine * 1e3:.2f} ms | {theirs / mine:.2f}x | "
               f"{diff:.1e} |")
        if kernel:
            def fast():
                return prefill_attention_bf16.continued_prefill_bf16(q, k, v)

            kernel_diff = (peer().float() - fast().float()).abs().max().item()
            quick = _median_seconds(fast, args.repeats)
            row += f" {quick * 1e3:.2f} ms | {mine / quick:.2f}x | {kernel_diff:.1e} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
