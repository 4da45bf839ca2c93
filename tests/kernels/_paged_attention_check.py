"""Run by tests/kernels/test_paged_attention.py in a subprocess with TRITON_INTERPRET=1.

Each case builds a random paged cache (blocks scattered through the pool, as after eviction) and
compares the Triton prefill or decode kernel with `paged_attention_reference`. Prints one JSON
object per line: {"case", "kernel", "dtype", "shape", "max_abs", "mean_abs", "seconds"}.
`python tests/kernels/_paged_attention_check.py NAME` runs one case.
"""

import json
import os
import sys
import time

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from kernels.paged_attention import paged_attention_reference  # noqa: E402
from kernels.paged_attention_triton import paged_decode, paged_prefill  # noqa: E402
from tests.kernels._paged_attention_cases import CASES, build, image_spans  # noqa: E402


def run_case(name: str) -> dict:
    kernel, dtype, heads, kv_heads, head_dim, block_size, lengths, options = CASES[name]
    q, k_cache, v_cache, cu, context, tables = build(dtype, heads, kv_heads, head_dim, block_size, lengths)
    window = options.get("window", 0)
    spans = image_spans(lengths, options["images"]) if "images" in options else None
    # the reference in float32 on the same (rounded) inputs: the kernels' only extra error is their own
    want = paged_attention_reference(q.float(), k_cache.float(), v_cache.float(), cu, context, tables, window=window,
                                     image_spans=spans)
    if spans is not None:  # the images must change the answer, or the case tests nothing
        causal = paged_attention_reference(q.float(), k_cache.float(), v_cache.float(), cu, context, tables,
                                           window=window)
        assert (causal - want).abs().max() > 1e-2, f"{name}: the images changed nothing"
    started = time.perf_counter()
    if kernel == "prefill":
        got = paged_prefill(q, k_cache, v_cache, cu, context, tables, max(q for q, _ in lengths),
                            window=window, block_m=options.get("block_m", 32), image_spans=spans)
    else:
        split = options["split_len"]
        splits = -(-max(c for _, c in lengths) // split)
        got = paged_decode(q, k_cache, v_cache, context, tables, split_len=split, max_splits=splits, window=window)
    seconds = time.perf_counter() - started
    diff = (got.float() - want).abs()
    return {"case": name, "kernel": kernel, "dtype": str(dtype).removeprefix("torch."),
            "shape": {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "block_size": block_size,
                      "q_len_context": lengths, **options},
            "max_abs": float(diff.max()), "mean_abs": float(diff.mean()), "seconds": round(seconds, 2)}


def main() -> None:
    for name in sys.argv[1:] or CASES:
        print(json.dumps(run_case(name)), flush=True)


if __name__ == "__main__":
    main()
