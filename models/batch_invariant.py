"""Batch-invariant row work for the CPU (issue 48): every row computed the same way however many share the call.

A matrix product's kernel (MKL, oneDNN, FBGEMM) picks its blocking and its split of the reduction by
the number of rows M, so a token's output bits depend on how many other tokens were in its step
(benchmarks/batch_invariance_probe.py measures where: on an AMX Xeon plain `F.linear` varied at
M = 33, 64, 100, 257 ... for most shapes). Elementwise transcendental ops (SiLU,
tanh) are vectorised except for a tail the thread split decides, which moves with M too.

The cure used here: the row-wise parts of a layer run on tiles of exactly `row_tile_for(dtype)` rows,
the last one padded with zero rows. Every call then has the same shape, the kernels take the same path
every time, and a row's bits depend only on its own inputs, at a fixed thread count (the probe found 1
and 2 threads differ for some shapes, so the engine fixes the count in this mode). The linears run on
weights packed once for the tile height (`PackedTileLinear`): plain `F.linear` repacks the weight on every
call, which made 16-row tiles 3.5-5.6x one call at 512 rows in bf16.

int8 (`Int8DynamicLinear.set_exact`) needs no tile for its product: with the activation range pinned to
[-1, 1] each row's codes are its own and the int8 products sum exactly in int32, so the decoder calls it on
all rows at once (`height_invariant`); only the norms and the gate around it run in tiles.

    from models.batch_invariant import ROW_TILE, row_tiles, set_batch_invariant
    set_batch_invariant(adapter, ROW_TILE)   # the engine does this when EngineConfig.deterministic
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from models.cpu_matmul import onednn_float32

__all__ = ["ROW_TILE", "PackedTileLinear", "row_tile_for", "row_tiles", "set_batch_invariant"]

# Rows per call in the deterministic mode. 16: the cheapest tile for one-row decode in bf16 on the probe's
# Xeon (T=16 vs T=64: 83 vs 144 us at M=1, 576x1536), and an even height, so two threads split a tile's
# elementwise work on a row boundary.
ROW_TILE = 16


def row_tiles(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor], tile: int) -> torch.Tensor:
    """`fn` applied to x (rows, features) in calls of exactly `tile` rows (the last padded with zeros).

    `fn` must treat rows independently; its result is (rows, out_features).
    """
    rows = x.shape[0]
    if rows == tile:
        return fn(x)
    pad = (-rows) % tile
    if pad:
        x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])
    if x.shape[0] == tile:
        return fn(x)[:rows]
    return torch.cat([fn(part) for part in x.split(tile)])[:rows]


def row_tile_for(dtype: torch.dtype, device: str = "cpu") -> int:
    """Rows per call of the decoder layers' row work in the deterministic mode, for a model in `dtype`.

    On CUDA: 128 (a GPU pads a decode step's few rows to 128 at little cost, and prefill makes fewer calls;
    untimed so far: no GPU was lent).

    bf16 on oneDNN with packed weights (`PackedTileLinear`): 32. Qwen2.5-1.5B on the AMX Xeon, the mode
    against the default on a decode-heavy workload (4 sessions, 48 new tokens) and a prefill-heavy one
    (8 sessions x 2 turns of 300 tokens): tiles of 16 1.05x and 2.17x, of 32 1.15x and 1.63x, of 64 1.39x
    and 1.55x. float32 (MKL's packed sgemm): 16 (1.9x one row, 1.3x per row at 512).
    """
    if device == "cuda":
        return 128
    return 32 if dtype == torch.bfloat16 and _mkldnn_packed() else ROW_TILE


def _mkldnn_packed() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _mkl_packed() -> bool:
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")


class PackedTileLinear:
    """An `nn.Linear` on tiles of exactly `tile` rows through a copy of its weight packed once for that height.

    A plain `F.linear` repacks the weight for the kernel on every call; on tiles of a few rows that repacking
    and re-reading cost more than the product (bf16 1536 -> 8960 at 512 rows in tiles of 16: 35 ms plain vs
    26 ms packed; tiles of 64 packed: 8.8 ms; one plain call 6.5 ms). Every call has the same shape, so the
    kernel's path, and a row's bits, do not depend on the other rows. bf16 goes through oneDNN
    (`mkldnn._linear_pointwise`), float32 through MKL's packed sgemm (`mkl._mkl_linear`) on Intel CPUs and
    through oneDNN on others (models/cpu_matmul.py says why; 16-row tiles on an AVX2 EPYC, oneDNN against MKL:
    3072 x 576 0.48 vs 0.82 ms, 49152 x 576 11.0 vs 21.1 ms, 17920 x 1536 10.2 vs 23.1 ms); without them,
    plain `F.linear` on the tile. The packed copy costs the weight's bytes again while the mode is on.
    """

    def __init__(self, linear: nn.Linear, tile: int) -> None:
        self.tile = tile
        self._pack(linear)

    def _pack(self, linear: nn.Linear) -> None:
        weight = linear.weight
        self.source, self.version = weight, weight._version  # a new or changed weight is packed again
        self.weight, self.bias = weight.detach(), None if linear.bias is None else linear.bias.detach()
        self.kind = "plain"
        onednn = weight.dtype == torch.bfloat16 or (weight.dtype == torch.float32 and onednn_float32())
        if weight.device.type == "cpu" and onednn and _mkldnn_packed():
            self.packed, self.kind = torch.ops.mkldnn._reorder_linear_weight(self.weight, self.tile), "onednn"
        elif weight.device.type == "cpu" and weight.dtype == torch.float32 and _mkl_packed():
            self.packed, self.kind = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, self.tile), "mkl"

    def __call__(self, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """linear's product on x, exactly `tile` rows."""
        assert x.shape[0] == self.tile, (x.shape, self.tile)
        if linear.weight is not self.source or linear.weight._version != self.version:
            self._pack(linear)  # weights loaded or updated in place since they were packed
        if self.kind == "onednn":
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        if self.kind == "mkl":
            return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, self.bias, self.tile)
        return nn.functional.linear(x, self.weight, self.bias)


def set_batch_invariant(model: nn.Module, tile: int | None) -> None:
    """Turn the batch-invariant row work of `model`'s decoder layers on (`tile` rows per call) or off (None).

    Decoder layers run their norms, projections and MLP in tiles; int8 linears switch to per-row
    scales with exact int32 accumulation. An adapter shared by two engines of different modes is switched
    by each engine's runner before its steps (`ModelRunner.forward_layout`).
    """
    assert tile is None or tile > 0, tile
    model.batch_invariant_tile = tile  # what the model runs now (model runners check it before each step)
    for module in model.modules():  # by what they offer: models.decoder imports this module, not the reverse
        if hasattr(module, "row_tile"):  # a DecoderLayer: its linears get weights packed for the tile height
            module.row_tile = tile
            for linear in module.children():
                if type(linear) is nn.Linear:
                    packs = linear.__dict__.setdefault("_tile_packs", {})  # kept while the adapter lives
                    if tile is not None and tile not in packs:
                        packs[tile] = PackedTileLinear(linear, tile)
                    linear.__dict__["tile_linear"] = None if tile is None else packs[tile]
        elif hasattr(module, "set_exact"):  # an Int8DynamicLinear
            module.set_exact(tile is not None)
