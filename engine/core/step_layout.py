"""One step's inputs as compact host arrays, and their trip to the device in one copy.

The model runner turns the scheduled chunks into a `StepLayout` with numpy (no per-token Python
objects, no mask): token ids, positions, the cache slot of every new token, and per sequence its
first query row, its context length after the chunk and its block table. Nothing in it is
length x context: a 512-token chunk after 4,000 cached tokens costs 512 slots, 3 lengths and a
row of 282 block ids.

`pack_to_device` lays the arrays a step needs end to end in one host buffer (pinned on CUDA) and
copies it with one non-blocking transfer; the device tensors are views into that one buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from engine.core.scheduler import Chunk
from models.base import MultimodalChunk

__all__ = ["StepLayout", "build_layout", "pack_to_device"]


@dataclass(slots=True)
class StepLayout:
    """Host-side description of one forward step (numpy arrays, built once)."""

    input_ids: np.ndarray  # (tokens,) int64
    positions: np.ndarray  # (tokens,) int64, or (position_dims, tokens) for M-RoPE
    slot_mapping: np.ndarray  # (tokens,) int64 cache slot each new token's K/V is written to
    cu_seqlens_q: np.ndarray  # (seqs + 1,) int32 first row of each sequence's chunk in the batch
    context_lens: np.ndarray  # (seqs,) int32 keys of each sequence after its chunk
    block_tables: np.ndarray  # (seqs, max_blocks) int32, rows padded with 0 past a sequence's blocks
    sample_rows: np.ndarray  # (sampling chunks,) int64 rows whose logits are sampled
    max_q_len: int  # longest chunk, tokens
    max_context_len: int  # longest context after its chunk, tokens
    mm_chunks: list[MultimodalChunk] = field(default_factory=list)  # image parts in this step
    # sliding-window layers with a pool of their own (engine/core/window_blocks.py): their tables and slots
    window_block_tables: np.ndarray | None = None
    window_slot_mapping: np.ndarray | None = None
    # models whose image tokens attend both ways (ModelShape.bidirectional_images), when the step has image rows:
    # (2, tokens) int32, per row the [start, end) of its image in its sequence (0, 0 for text rows)
    image_spans: np.ndarray | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def num_seqs(self) -> int:
        return len(self.context_lens)

    @property
    def all_decode(self) -> bool:
        """Every chunk is one token (a decode step)."""
        return self.max_q_len == 1

    @property
    def samples_every_row(self) -> bool:
        """Every row is sampled in order (a decode step where every sequence generates)."""
        return len(self.sample_rows) == self.num_tokens


def build_layout(chunks: list[Chunk], block_size: int, position_dims: int = 1, window: bool = False,
                 bidirectional: bool = False) -> StepLayout:
    """The layout of a step from its scheduled chunks (in chunk order); `window`: also the sliding-window layers'
    block tables and slots (from each sequence's `window_table`); `bidirectional`: the image spans of image rows."""
    ids: list[int] = []
    positions = []
    tables = []
    q_lens = np.empty(len(chunks), dtype=np.int32)
    starts = np.empty(len(chunks), dtype=np.int64)
    mm_chunks: list[MultimodalChunk] = []
    image_rows: list[tuple[int, int, int, int]] = []  # (first row, end row, image start, image end)
    sample_rows: list[int] = []
    for i, chunk in enumerate(chunks):
        seq = chunk.request.seq
        row = len(ids)
        start, stop = chunk.start, chunk.start + chunk.length
        ids.extend(seq.token_ids[start:stop])
        positions.append(seq.positions[start:stop])  # (length, dims) int32 view
        tables.append(seq.block_table.array[: -(-stop // block_size)])  # a view: the step copies it once
        q_lens[i], starts[i] = chunk.length, start
        for item_start, item in seq.mm_items:
            lo, hi = max(start, item_start), min(stop, item_start + item.length)
            if lo < hi:
                mm_chunks.append(MultimodalChunk(row + lo - start, item, lo - item_start, hi - item_start))
                if bidirectional:
                    image_rows.append((row + lo - start, row + hi - start, item_start, item_start + item.length))
        if chunk.samples:  # its last row, and with draft tokens the row before each draft too
            sample_rows.extend(range(row + chunk.length - 1 - chunk.drafts, row + chunk.length))
    cu_seqlens_q = np.zeros(len(chunks) + 1, dtype=np.int32)
    np.cumsum(q_lens, out=cu_seqlens_q[1:])
    context_lens = (starts + q_lens).astype(np.int32)
    # token -> (its sequence, its index in the sequence) -> its slot, all vectorised
    seq_of_token = np.repeat(np.arange(len(chunks)), q_lens)
    index = np.arange(len(ids)) - np.repeat(cu_seqlens_q[:-1], q_lens) + np.repeat(starts, q_lens)

    def tables_and_slots(tables: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        width = max((len(t) for t in tables), default=0)
        block_tables = np.zeros((len(chunks), max(width, 1)), dtype=np.int32)
        for i, table in enumerate(tables):
            block_tables[i, : len(table)] = table
        slots = block_tables[seq_of_token, index // block_size].astype(np.int64) * block_size + index % block_size
        return block_tables, slots

    block_tables, slot_mapping = tables_and_slots(tables)
    window_tables = window_slots = None
    if window:
        window_tables, window_slots = tables_and_slots(
            [c.request.seq.window_table.array[: -(-(c.start + c.length) // block_size)] for c in chunks])
    image_spans = None
    if image_rows:
        image_spans = np.zeros((2, len(ids)), dtype=np.int32)
        for first, end, image_start, image_end in image_rows:
            image_spans[0, first:end], image_spans[1, first:end] = image_start, image_end
    stacked = np.concatenate(positions) if positions else np.zeros((0, position_dims), np.int32)
    position_array = stacked[:, 0] if position_dims == 1 else stacked.T
    return StepLayout(
        input_ids=np.asarray(ids, dtype=np.int64),
        positions=np.ascontiguousarray(position_array, dtype=np.int64),
        slot_mapping=slot_mapping,
        cu_seqlens_q=cu_seqlens_q,
        context_lens=context_lens,
        block_tables=block_tables,
        sample_rows=np.asarray(sample_rows, dtype=np.int64),
        max_q_len=int(q_lens.max()) if len(chunks) else 0,
        max_context_len=int(context_lens.max()) if len(chunks) else 0,
        mm_chunks=mm_chunks,
        window_block_tables=window_tables,
        window_slot_mapping=window_slots,
        image_spans=image_spans,
    )


_TORCH_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32, np.dtype(np.bool_): torch.bool,
                 np.dtype(np.float32): torch.float32}


def pack_to_device(arrays: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """Copy host arrays to `device` as one buffer: one (pinned, non-blocking) transfer on CUDA.

    Returns:
        name -> tensor of the array's dtype and shape; all are views of one device buffer.
    """
    offsets: dict[str, int] = {}
    total = 0
    for name, array in arrays.items():
        total = -(-total // 8) * 8  # 8-byte aligned, so any dtype can view its slice
        offsets[name] = total
        total += array.nbytes
    host = torch.empty(max(total, 8), dtype=torch.uint8, pin_memory=device.type == "cuda")
    buffer = host.numpy()
    for name, array in arrays.items():
        start = offsets[name]
        buffer[start : start + array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    packed = host if device.type == "cpu" else host.to(device, non_blocking=True)
    out = {}
    for name, array in arrays.items():
        start = offsets[name]
        flat = packed[start : start + array.nbytes].view(_TORCH_DTYPES[array.dtype])
        out[name] = flat.view(array.shape)
    return out
