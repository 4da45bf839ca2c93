"""Compile a Triton kernel for a GPU that is not here: the compiled path checked on a CPU-only machine.

The interpreter (`TRITON_INTERPRET=1`) runs kernels as numpy and forgives what the compiler does
not (mismatched types across branches, dot shapes, shared memory beyond the chip's). Triton's
NVIDIA backend ships its own `ptxas`, so a kernel can be lowered all the way to a cubin for, say,
an H200 (compute capability 9.0) without a device; `scripts/gpu_check.sh --dry-run` and a slow
test do that for the engine's kernels.
"""

from __future__ import annotations

import time

__all__ = ["compile_kernel"]


def compile_kernel(kernel, types: dict[str, str], constexprs: dict, capability: int = 90) -> dict:
    """Lower `kernel` to a cubin for `sm_{capability}`.

    Args:
        kernel: a `@triton.jit` function.
        types: Triton type of every non-constexpr argument by name ("*bf16", "*i32", "i32", "fp32");
            arguments not listed default to "i32" for scalars (names not ending in `_ptr`).
        constexprs: values of the constexpr arguments.
        capability: CUDA compute capability (90: H100/H200).

    Returns:
        {"seconds", "shared_bytes", "num_warps", "num_stages"} of the compiled kernel.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in types:
            signature[name] = types[name]
        else:
            assert not name.endswith("_ptr"), f"give the pointer type of {name}"
            signature[name] = "i32"
    started = time.perf_counter()
    compiled = triton.compile(ASTSource(kernel, signature, constexprs=constexprs),
                              target=GPUTarget("cuda", capability, 32))
    meta = compiled.metadata
    return {"seconds": round(time.perf_counter() - started, 1), "shared_bytes": int(meta.shared),
            "num_warps": int(meta.num_warps), "num_stages": int(meta.num_stages)}
