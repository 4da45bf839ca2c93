"""Batch-invariant row work for the CPU (issue 48): every row computed the same way however many share the call.

A matrix product's kernel (MKL, oneDNN, FBGEMM) picks its blocking and its split of the reduction by
the number of rows M, so a token's output bits depend on how many other tokens were in its step
(benchmarks/batch_invariance_probe.py measures where: on an AMX Xeon plain `F.linear` varied at
M = 33, 64, 100, 257 ... for most shapes). Elementwise transcendental ops (SiLU,
tanh) are vectorised except for a tail the thread split decides, which moves with M too.

The cure used here: the row-wise parts of a layer run on tiles of exactly `ROW_TILE` rows, the last one
padded with zero rows. Every call then has the same shape, the kernels take the same path every time,
and a row's bits depend only on its own inputs, at a fixed thread count (the probe found 1 and 2
threads differ for some shapes, so the engine fixes the count in this mode). Tiles of 16 rows cost
least where it matters most, decode (one to a few rows per sequence): in bf16 on the AMX Xeon
1.0-1.4x plain `F.linear` at one row, but 3.5-5.6x at 512 rows (prefill).

int8 (`Int8DynamicLinear.exact`) needs no tile for its product: each row gets its own scale and the
int8 x int8 product accumulates exactly in int32, so the order of the sum cannot matter.

    from models.batch_invariant import ROW_TILE, row_tiles, set_batch_invariant
    set_batch_invariant(adapter, ROW_TILE)   # the engine does this when EngineConfig.deterministic
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["ROW_TILE", "row_tiles", "set_batch_invariant"]

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


def set_batch_invariant(model: nn.Module, tile: int | None) -> None:
    """Turn the batch-invariant row work of `model`'s decoder layers on (`tile` rows per call) or off (None).

    Decoder layers run their norms, projections and MLP in tiles; int8 linears switch to per-row
    scales with exact int32 accumulation. An adapter shared by two engines of different modes is switched
    by each engine's runner before its steps (`ModelRunner.forward_layout`).
    """
    assert tile is None or tile > 0, tile
    model.batch_invariant_tile = tile  # what the model runs now (model runners check it before each step)
    for module in model.modules():  # by what they offer: models.decoder imports this module, not the reverse
        if hasattr(module, "row_tile"):  # a DecoderLayer
            module.row_tile = tile
        elif hasattr(module, "set_exact"):  # an Int8DynamicLinear
            module.set_exact(tile is not None)
