"""int4 and int8 linears on torch's native CPU kernels: int4 weight-only, and int8 weights with int8 activations.

`Int4Linear` holds 4-bit codes in groups of `group_size` along the input dimension, asymmetric
(w ≈ (q − 8)·scale + zero, tinygemm's convention), packed by `aten._convert_weight_to_int4pack_for_cpu`
and multiplied by `aten._weight_int4pack_mm_for_cpu` (bf16 activations inside the kernel). At decode
(a few rows) a step is bound by reading weights, and int4 reads an eighth of float32's bytes. One
8960×1536 linear (Qwen2.5-1.5B's MLP), 2 threads, median of 30 on a 2-core AVX2 EPYC (no avx512):
int4 1.17 ms vs fp32 3.92 ms at 1 row, 2.8 vs 8.1 at 8 rows, 7.2 vs 9.7 at 16, 13.3 vs 17.7 at 32
(groups of 32), and fp32 faster from there (49 vs 45 ms at 128 rows, 140 vs 78 at 256). So steps with more rows than
`dense_rows` (prefill chunks) run through a dense copy of the dequantised weight in the model dtype
when one is kept (`keep_dense=True`: the memory of int4 plus the dense weight, the speed of both;
prefill and decode then see the same quantised weights). Without it they stay on the int4 kernel
and the layer holds only the packed codes.

`quantize_weight_int4` / `dequantize_int4` are the reference the tests check the kernel against.

`Int8DynamicLinear` (below) is FBGEMM's dynamic int8 linear: on this AVX2 CPU it beats both float32
and the int4 kernel at every row count. On CPUs with AMX int8 tiles, steps of `INT8_WIDE_ROWS` rows
or more (prefill chunks, wide decode batches) run on oneDNN's kernel instead, from a second packed copy. torch's int8 *weight-only* kernel (`aten._weight_int8pack_mm`)
was measured too and is not used: 10 ms at 1 row and 3.2 s at 256 rows, slower than float32 everywhere.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

__all__ = ["INT8_WIDE_ROWS", "Int4Linear", "Int8DynamicLinear", "amx_int8", "dequantize_int4", "quantize_weight_int4"]

_INNER_K_TILES = 1  # the CPU packing's tile count (the only value the CPU kernel needs)
# Rows from which an int8 step runs on oneDNN (AMX tiles) rather than FBGEMM (AVX-512 VNNI), where both are packed.
# Qwen2.5-1.5B's four linears of one layer, 2 threads, median of 5, on the 2-core AMX Xeon (benchmarks/bench_int8.py),
# FBGEMM's time over the dispatch's: 0.97 at 32 rows (break-even), 1.29 at 64, 1.47 at 128, 2.11 at 512, 1.37 at 2048;
# oneDNN alone is 2.6x slower than FBGEMM at 1 row. The engine's prefill of a 2048-token prompt (qwen2.5-1.5b, int8,
# float32, chunks of 2048): 51.6 tok/s FBGEMM only, 69.4 with the dispatch.
INT8_WIDE_ROWS = 64


def amx_int8() -> bool:
    """Whether this CPU has AMX int8 tiles and torch has oneDNN's quantised engine to use them."""
    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    return bool(capabilities.get("amx_int8")) and "onednn" in torch.backends.quantized.supported_engines


def quantize_weight_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Codes (N, K) int32 in 0..15, scales and zeros (N, K/group) float32 of `weight` (N, K)."""
    out_features, in_features = weight.shape
    groups = weight.float().reshape(out_features, in_features // group_size, group_size)
    low, high = groups.amin(-1), groups.amax(-1)  # (N, K/group)
    scale = ((high - low) / 15).clamp(min=1e-8)
    zero = low + 8 * scale
    codes = ((groups - low.unsqueeze(-1)) / scale.unsqueeze(-1)).round().clamp(0, 15).to(torch.int32)
    return codes.reshape(out_features, in_features), scale, zero


def dequantize_int4(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int) -> torch.Tensor:
    """The float32 weight (N, K) that `codes`, `scale`, `zero` stand for."""
    out_features, in_features = codes.shape
    groups = codes.reshape(out_features, in_features // group_size, group_size).float()
    return ((groups - 8) * scale.unsqueeze(-1) + zero.unsqueeze(-1)).reshape(out_features, in_features)


class Int4Linear(nn.Module):
    """`nn.Linear` with 4-bit grouped weights (CPU).

    Args:
        linear: the layer to replace; its weight (N, K) needs K divisible by `group_size`.
        group_size: input features per (scale, zero) pair.
        dense_rows: steps with more rows than this use the dense weight (when kept).
        keep_dense: keep the dequantised weight in the model dtype for those steps.
    """

    def __init__(self, linear: nn.Linear, group_size: int = 32, dense_rows: int = 32, keep_dense: bool = True) -> None:
        super().__init__()
        out_features, in_features = linear.weight.shape
        assert in_features % group_size == 0, "checked by models.quantize before replacing a layer"
        self.in_features, self.out_features, self.group_size, self.dense_rows = in_features, out_features, group_size, dense_rows
        self.dtype = linear.weight.dtype
        codes, scale, zero = quantize_weight_int4(linear.weight.data, group_size)
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, _INNER_K_TILES))
        # (K/group, N, 2): the kernel's layout of (scale, zero) pairs, in the activation dtype it runs in
        pairs = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous()
        self.register_buffer("scales_and_zeros", pairs.to(torch.bfloat16))
        dense = dequantize_int4(codes, scale, zero, group_size).to(self.dtype) if keep_dense else None
        self.register_buffer("dense", dense)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.data.clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # (M, K)
        if self.dense is not None and rows.shape[0] > self.dense_rows:
            return nn.functional.linear(x, self.dense, self.bias)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows.to(torch.bfloat16), self.packed, self.group_size,
                                                       self.scales_and_zeros)  # (M, N) bf16
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, group_size={self.group_size}, "
                f"dense_rows={self.dense_rows if self.dense is not None else None}")


class Int8DynamicLinear(nn.Module):
    """`nn.Linear` with int8 weights (per output channel) and int8 activations quantised per step (x86 CPU).

    FBGEMM's dynamic linear (`quantized::linear_dynamic`): each call picks the activations' scale from
    their range (7-bit: `reduce_range` avoids the saturation of AVX2's u8×s8 dot product; rows are
    normalised first so each token gets its own scale),
    multiplies in int8 with int32 accumulation and returns float32. Weights are a quarter of float32's
    bytes. One 8960×1536 linear, 2 threads, median of 10 on the 2-core AVX2 EPYC: 0.41 ms vs float32's
    4.44 at 1 row, 1.04 vs 8.34 at 8, 8.1 vs 21.8 at 64, 69.6 vs 159.6 at 600 — faster than float32
    and than the int4 kernel at every size, so it needs no dense copy. Activations enter and leave in
    the model dtype (the kernel computes in float32).

    `wide` (default: `amx_int8()`) also packs the weights for oneDNN, whose AMX kernel is 1.4-2.1x
    FBGEMM from 128 rows up but 2.6x slower at 1 row; steps of `INT8_WIDE_ROWS` rows or more use it.
    It costs a second copy of the int8 weights (counted in `weight_bytes`). Both kernels quantise the
    activations alike (7-bit, one scale per call) and accumulate exactly in int32: outputs agree to
    float rounding, except where an activation rounds to the other neighbouring code (measured: 3 of
    128 rows and 5 of 300 differ, by 1e-3 on outputs of size 2, against an int8 error of 4e-2 on both).
    """

    def __init__(self, linear: nn.Linear, wide: bool | None = None) -> None:
        super().__init__()
        weight = linear.weight.data.float()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        scale = (weight.abs().amax(dim=1) / 127).clamp(min=1e-8).double()  # (N,)
        with warnings.catch_warnings():  # quantised tensor constructors are deprecated (the kernel is not); torch is pinned
            warnings.simplefilter("ignore", UserWarning)
            codes = torch.quantize_per_channel(weight, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
        # the bias is added after the row scale is multiplied back, so the kernel gets none
        self.register_buffer("bias", None if linear.bias is None else linear.bias.data.float().clone())
        self._packed = torch.ops.quantized.linear_prepack(codes, None)  # a torch script object, not a buffer
        self._wide = _prepack_onednn(codes) if (amx_int8() if wide is None else wide) else None
        self.weight_bytes = codes.numel() * (1 if self._wide is None else 2) + scale.numel() * 4
        self.height_invariant = False  # batch-invariant mode: see `set_exact`

    def set_exact(self, on: bool) -> None:
        """Batch-invariant mode on or off: every row's int8 codes and int32 sums depend on that row alone.

        FBGEMM quantises all rows of a call with one range, so after the per-row normalisation in `forward`
        a row's codes still depended on the rows beside it (on whether any other row's peak is negative). In
        this mode every call gets two more rows, one holding +1 and one -1, so the call's range is always
        exactly [-1, 1] (a normalised row never leaves it: |x| / peak <= 1 in IEEE division): the scale and
        zero point are fixed, each row's codes are its own, the u8 x s8 products (7-bit activations, no
        saturation) sum exactly in int32 in any order, and the dequantisation is per element. So a row's
        bits do not depend on the call's height, and the decoder calls these linears untiled
        (`height_invariant`). Always FBGEMM: oneDNN's kernel dequantises with other float rounding.
        1536 -> 8960 on the AMX Xeon, 2 threads: as fast as the default path up to 8 rows, 2-3x it from 64
        rows (where the default takes oneDNN's AMX kernel); the earlier per-row-scale `torch._int_mm` path in
        16-row tiles cost 3x FBGEMM at 1 row and 8x at 512.
        """
        self.height_invariant = on

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()  # (M, K)
        # The kernel quantises all rows with one scale; dividing each row by its own peak first gives every token
        # the full int8 range (y is linear in x, so the row's scale multiplies back out). SmolLM2's top-1 agreement
        # with float32: 0.54 with one scale per call, 0.885 with one per row (its channel outliers remain).
        peak = rows.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6)  # (M, 1); vector_norm(inf) is 4-5x slower
        normalised = rows / peak
        if self.height_invariant:  # the range pinned to [-1, 1] by two more rows, FBGEMM always (see `set_exact`)
            pins = rows.new_zeros(2, self.in_features)
            pins[0, 0], pins[1, 0] = 1.0, -1.0
            y = torch.ops.quantized.linear_dynamic(torch.cat([normalised, pins]), self._packed, True)[:-2]
        else:
            packed = self._packed if self._wide is None or rows.shape[0] < INT8_WIDE_ROWS else self._wide
            y = torch.ops.quantized.linear_dynamic(normalised, packed, True)  # (M, N) float32
        # the row scale multiplied back in place: a new (M, N) tensor costs its page faults (same bits)
        y = y.mul_(peak) if self.bias is None else torch.addcmul(self.bias, y, peak)
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        wide = f", oneDNN from {INT8_WIDE_ROWS} rows" if self._wide is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights and activations{wide}"


def _prepack_onednn(codes: torch.Tensor):
    """`codes` packed for oneDNN's kernel (the packing follows the global quantised engine, so it is set and restored)."""
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = "onednn"
    try:
        return torch.ops.quantized.linear_prepack(codes, None)
    finally:
        torch.backends.quantized.engine = engine
