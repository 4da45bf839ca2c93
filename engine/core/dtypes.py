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

__all__ = ["AutoDtype", "auto_dtype", "cpu_bf16_flags", "warn_if_emulated"]

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


@functools.cache
def warn_if_emulated(device: str, dtype_name: str) -> bool:
    """Warn once when bf16 is asked for on a CPU that emulates it; True when it warned."""
    if device != "cpu" or dtype_name != "bfloat16" or cpu_bf16_flags():
        return False
    log.warning("dtype bfloat16 on a CPU without avx512_bf16 or amx_bf16: it works, but torch emulates bf16 "
                "matmuls here and they are slower than float32; use --dtype auto (float32 on this CPU)")
    return True
