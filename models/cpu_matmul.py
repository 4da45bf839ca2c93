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

bfloat16 linears outside autograd go through oneDNN with the weight reordered once into its blocked layout
(`torch.ops.mkldnn._reorder_linear_weight`, as torch's compiler does for CPU linears) and kept beside the weight.
`F.linear` reorders it at every call. On an AMD EPYC Zen 5 (avx512_bf16, 2 threads, torch 2.14.1, weights beyond
the cache; 2026-12-07) the results are the same bits at 1, 8, 83 and 512 rows, and per call:

    weight (out x in)           rows   F.linear   packed
    3072 x 576 (SmolLM2 MLP)       8     252 us    130 us
    8960 x 1536 (Qwen2.5-1.5B)     8    1124 us    773 us
    1536 x 8960                    8    1506 us   1052 us
    3072 x 576 (one weight)       83     361 us    327 us

`dossier bench serve --model qwen2.5-1.5b --peers dossier` went from 1,043 / 1,235 to 1,496 / 1,600 episodes/h
(alternating); SmolLM2's serve run did not change beyond its noise. The packed copy doubles the memory of the
linears it covers, so a weight is packed only while the machine keeps a quarter of its memory available after it
(`/proc/meminfo`, read once per weight); beyond that it stays on `F.linear`. A packed weight changed in place (its
`_version`) is packed again.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = ["cpu_vendor", "linear", "onednn_float32", "packed_bytes"]

log = logging.getLogger(__name__)


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
    """`F.linear(x, weight, bias)`; on the CPU outside autograd, float32 goes through oneDNN where `onednn_float32`,
    and bfloat16 through oneDNN on a weight packed once (module docstring)."""
    if x.device.type != "cpu" or x.dtype != weight.dtype or (
            torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        return F.linear(x, weight, bias)
    if x.dtype == torch.float32 and onednn_float32():
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    if x.dtype == torch.bfloat16:
        packed = _packed(weight)
        if packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return F.linear(x, weight, bias)


_PACK_ROWS = 8  # the row count oneDNN chooses the blocked layout for (a decode step's); any row count runs on it
_KEEP_AVAILABLE = 0.25  # pack no weight that would leave less than this share of the machine's memory available
_packed_total = [0]  # bytes of packed copies made in this process
_unpackable: list[str] = []  # why packing is off in this process, once known


def packed_bytes() -> int:
    """Bytes of packed bfloat16 weight copies this process made (beside the weights themselves)."""
    return _packed_total[0]


def _available_memory() -> tuple[int, int] | None:
    """(available, total) bytes of the machine's memory from /proc/meminfo; None where it cannot be read."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        return int(fields["MemAvailable"].split()[0]) * 1024, int(fields["MemTotal"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _packed(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` (out, in) in oneDNN's blocked layout, made once and kept on the tensor; None: use F.linear."""
    cached = getattr(weight, "_dossier_packed", None)
    if cached is not None and cached[0] == _version(weight):
        return cached[1]
    if _unpackable or weight.dim() != 2 or weight.layout != torch.strided or (
            cached is None and getattr(weight, "_dossier_unpacked", False)):  # refused once: no /proc read per call
        return None
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        _unpackable.append("torch has no oneDNN linear packing")
        return None
    memory = _available_memory()
    if memory is None or memory[0] - weight.nbytes < _KEEP_AVAILABLE * memory[1]:
        weight._dossier_packed = None
        weight._dossier_unpacked = True  # decided once per weight: it stays on F.linear
        log.debug("not packing a %s weight: %s", tuple(weight.shape),
                  "no /proc/meminfo" if memory is None else "it would leave under a quarter of memory free")
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), _PACK_ROWS)
    except RuntimeError as err:  # a oneDNN build or CPU without bf16 reorders: F.linear from now on
        _unpackable.append(f"oneDNN cannot pack bfloat16 here: {err}")
        log.info("bfloat16 linears stay on F.linear: %s", _unpackable[0])
        return None
    if cached is None:
        _packed_total[0] += weight.nbytes
    weight._dossier_packed = (_version(weight), packed)
    return packed


def _version(weight: torch.Tensor) -> int:
    """The tensor's in-place change counter; -1 for a tensor made under inference mode, which keeps none."""
    try:
        return weight._version
    except RuntimeError:
        return -1
