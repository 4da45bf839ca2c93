"""Which dtype `dtype="auto"` means on this machine, and why.

On a GPU it is bfloat16 (fp16 is unstable for the Qwen-VL models). On a CPU it is bfloat16 when the
CPU multiplies bf16 natively (AVX512-BF16 or AMX-BF16: bf16 linears are 3-5x float32 on a 2-core
AVX512-BF16 machine, see shared/OFFLINE-FACTS.md), and float32 elsewhere: without those
instructions torch emulates bf16 matmuls and they are slower than float32.

The CPU's flags come from /proc/cpuinfo (Linux); where it cannot be read, torch's own dispatch
level (`torch.backends.cpu.get_cpu_capability()`: "AVX512", "AMX" ...) is the fallback, and only
"AMX" there proves bf16 support.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import NamedTuple

__all__ = ["AUTO_INT8_FROM", "AutoDtype", "AutoQuantization", "auto_dtype", "auto_quantization", "cpu_bf16_flags",
           "warn_if_emulated"]

log = logging.getLogger(__name__)

# CPU flags that make bf16 matmuls native (oneDNN's AVX512-BF16 and AMX kernels).
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


class AutoDtype(NamedTuple):
    """What dtype="auto" resolves to on a device, and the sentence that says why."""

    name: str  # "bfloat16" or "float32"
    reason: str


@functools.cache
def cpu_bf16_flags() -> tuple[str, ...]:
    """The native-bf16 flags this CPU has (empty when none, or when they cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    found = tuple(flag for flag in _BF16_FLAGS if flag in flags)
    if found or text:
        return found
    try:  # no /proc/cpuinfo (not Linux): torch's dispatch level is the next best witness
        import torch

        return ("amx_bf16",) if torch.backends.cpu.get_cpu_capability() == "AMX" else ()
    except Exception:  # pragma: no cover - very old torch
        return ()


def auto_dtype(device: str) -> AutoDtype:
    """What dtype="auto" is on `device` ("cpu" or "cuda"), with the reason.

    Example:
        >>> auto_dtype("cpu")  # on a CPU with AVX512-BF16
        ('bfloat16', 'the CPU has avx512_bf16 (native bf16 matmuls, 3-5x float32)')
    """
    if device == "cuda":
        return AutoDtype("bfloat16", "a CUDA device (bf16 is stable for every family; fp16 is not for Qwen-VL)")
    flags = cpu_bf16_flags()
    if flags:
        return AutoDtype("bfloat16", f"the CPU has {'/'.join(flags)} (native bf16 matmuls, 3-5x float32)")
    return AutoDtype("float32", "the CPU has neither avx512_bf16 nor amx_bf16 (bf16 would be emulated, slower than "
                                "float32)")


# quantization="auto" quantises a model only from this many weights in its linear layers. Measured on a 2-core AVX2
# EPYC (docs/benchmarks.md): Qwen2.5-1.5B (1.3e9 there) served 1.54-1.70x llama.cpp in int8 and 0.31x in float32,
# while SmolLM2-135M (1.1e8) gained nothing in int8 (1,324-1,451 against 1,151-1,356 episodes/h), its make demo
# took 445 s against float32's 364 s and answered 0 of 20 against 1. Between the two nothing was measured.
AUTO_INT8_FROM = 1_000_000_000


class AutoQuantization(NamedTuple):
    """What quantization="auto" resolves to (None: the model's dtype throughout), and the sentence that says why."""

    name: str | None
    reason: str


def auto_quantization(device: str, dtype: str) -> AutoQuantization:
    """What quantization="auto" is on `device` when the dtype asked for is `dtype` ("auto" or a pinned one).

    int8 (FBGEMM: int8 weights, dynamic int8 activations with one scale per row) on a CPU without native bf16,
    when the dtype is left to "auto" (float32 there), for a model with at least AUTO_INT8_FROM weights in its
    linear layers (the engine applies that part at load, when the size is known): on a 2-core AVX2 EPYC it is
    the fastest kernel at every row count (docs/benchmarks.md), and on the 20 sample questions with the BM25
    agent and Qwen2.5-1.5B it answered 4 against float32's 6, a difference McNemar cannot tell from noise
    (p = 0.625; docs/results/dtypes-sample.md). A pinned dtype, a CPU with native bf16 and a GPU keep the
    model's dtype.

    Example:
        >>> auto_quantization("cpu", "auto")  # on an AVX2-only CPU
        ('int8', 'for models of 1B+ weights in their linears; the CPU has no native bf16: ...')
    """
    if device == "cuda":
        return AutoQuantization(None, "a CUDA device (bf16 throughout)")
    if dtype != "auto":
        return AutoQuantization(None, f"--dtype {dtype} was asked for")
    flags = cpu_bf16_flags()
    if flags:
        return AutoQuantization(None, f"the CPU has {'/'.join(flags)} (bf16 throughout)")
    return AutoQuantization("int8", "for models of 1B+ weights in their linears (and their output head); the CPU has "
                                    "no native bf16: FBGEMM's "
                                    "int8 is its fastest kernel at every size, and the sample suite's answers showed "
                                    "no significant loss against float32 (docs/results/dtypes-sample.md); smaller "
                                    "models gained nothing and stay float32; --quantization none keeps float32")


@functools.cache
def warn_if_emulated(device: str, dtype_name: str) -> bool:
    """Warn once when bf16 is asked for on a CPU that emulates it; True when it warned."""
    if device != "cpu" or dtype_name != "bfloat16" or cpu_bf16_flags():
        return False
    log.warning("dtype bfloat16 on a CPU without avx512_bf16 or amx_bf16: it works, but torch emulates bf16 "
                "matmuls here and they are slower than float32; use --dtype auto (float32 on this CPU)")
    return True
