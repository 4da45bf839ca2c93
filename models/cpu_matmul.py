"""The float32 matrix product of the CPU's linear layers: oneDNN where MKL's is slow (a CPU not made by Intel).

torch's `F.linear` multiplies float32 on the CPU with MKL's sgemm, and MKL chooses its fast code paths by the
CPU's vendor. On an AMD EPYC (Zen 3, AVX2 and FMA, no AVX-512; 2 cores, 2 threads, torch 2.14.1) the same
products through oneDNN (`torch.ops.mkldnn._linear_pointwise`, the op torch's own compiler emits for CPU
linears, on the weight as it is) measured, ms per call, median of 30 (2026-12-06, alone on the machine):

    weight (out x in)          rows   F.linear (MKL)   oneDNN
    1536 x 576 (SmolLM2 MLP)      8        0.303          0.141
    49152 x 576 (SmolLM2 head)    8       21.2            7.1
    8960 x 1536 (Qwen2.5-1.5B)    1        3.34           1.52
    8960 x 1536                   8       11.1            3.38
    8960 x 1536                  64       21.1           13.2
    8960 x 1536                 512      122            108

So a decode step (a few rows) is 2-3x faster on oneDNN there, prefill about the same. The two differ in
summation order only (largest difference 1e-4 on outputs of size ~20; a float32 rounding). On Intel CPUs
MKL's own paths are kept: no measurement here says oneDNN is faster there.

The batch-invariant mode has its own packed products (models/batch_invariant.py); autograd (training) keeps
`F.linear`, which has a backward.

    from models.cpu_matmul import linear
    y = linear(x, layer.weight, layer.bias)   # F.linear, through oneDNN where that is faster
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = ["cpu_vendor", "linear", "onednn_float32"]


@functools.cache
def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD", ...), or "" where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith("vendor_id"):
            return line.partition(":")[2].strip()
    return ""


@functools.cache
def onednn_float32() -> bool:
    """True when float32 CPU linears go through oneDNN: a CPU not made by Intel, and torch built with oneDNN."""
    vendor = cpu_vendor()
    return bool(vendor) and vendor != "GenuineIntel" and torch.backends.mkldnn.is_available() \
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`; float32 on the CPU outside autograd goes through oneDNN where `onednn_float32`."""
    if (x.dtype == torch.float32 and weight.dtype == torch.float32 and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and onednn_float32()):
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)
