"""Decode steps replayed from CUDA graphs captured at fixed batch sizes (nano-vllm's scheme).

A decode step launches a few hundred small kernels; on a GPU their launch cost rivals the work.
So at start-up the decode forward is captured once per batch bucket (1, 2, 4, 8, 16, 32, ...) over
static input buffers, and a decode step of n sequences copies its inputs into the buffers and
replays the smallest bucket >= n. Padding rows write their K/V to the runner's scratch block and
read one key from it, so they never touch a real sequence's cache.

`forward(bucket)` is the one function both paths run: captured on CUDA, called directly when
`capture=False` (the CPU tests drive the engine through it, padding included, and compare with
the plain eager step). Only the attention metadata builder differs per backend
(`AttentionBackend.graph_metadata`), and the Triton one is also exercised on the CPU under the
interpreter.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.core.attention import PagedAttention
from engine.core.step_layout import StepLayout, pack_to_device
from models.base import ForwardBatch

__all__ = ["DecodeGraphs", "batch_buckets"]


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 up to max_batch (and max_batch itself)."""
    small = [b for b in (1, 2, 4, 8) if b <= max_batch]
    return sorted(set(small) | set(range(16, max_batch + 1, 16)) | {max_batch})


class DecodeGraphs:
    """Static decode buffers, one graph per batch bucket, and the step that fills and replays them.

    Args:
        runner: the model runner (cache, adapter, attention backend, scratch block).
        max_batch: largest decode batch run this way (larger ones run eagerly).
        capture: capture CUDA graphs (CUDA only); False runs `forward` directly on the same buffers.
    """

    def __init__(self, runner, max_batch: int, capture: bool) -> None:
        self.runner = runner
        self.buckets = batch_buckets(max_batch)
        self.max_batch = self.buckets[-1]
        self.max_context = runner.max_context  # graph steps take contexts up to this, tokens
        block_size, device = runner.block_size, runner.device
        self.width = -(-self.max_context // block_size)  # block-table columns
        self.position_dims = runner.adapter.shape.position_dims
        self.scratch_slot = runner.scratch_block * block_size
        positions_shape = (self.max_batch,) if self.position_dims == 1 else (self.position_dims, self.max_batch)
        # the static inputs: start as all padding (scratch slot, one key, scratch block)
        self.static = {
            "input_ids": torch.zeros(self.max_batch, dtype=torch.int64, device=device),
            "positions": torch.zeros(positions_shape, dtype=torch.int64, device=device),
            "slot_mapping": torch.full((self.max_batch,), self.scratch_slot, dtype=torch.int64, device=device),
            "context_lens": torch.ones(self.max_batch, dtype=torch.int32, device=device),
            "block_tables": torch.full((self.max_batch, self.width), runner.scratch_block, dtype=torch.int32,
                                       device=device),
            "cu_seqlens_q": torch.arange(self.max_batch + 1, dtype=torch.int32, device=device),
        }
        self.workspace = runner.attention.graph_workspace(self.buckets, self.max_context)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}  # bucket -> captured logits (bucket, vocab)
        self.steps = 0  # decode steps run through the static buffers
        if capture:
            self._capture()

    def bucket(self, batch: int) -> int:
        return next(b for b in self.buckets if b >= batch)

    def can_run(self, layout: StepLayout) -> bool:
        """A decode step where every sequence samples, within the captured sizes."""
        return (layout.all_decode and layout.samples_every_row and not layout.mm_chunks
                and layout.num_seqs <= self.max_batch and layout.max_context_len <= self.max_context)

    def run(self, layout: StepLayout) -> torch.Tensor:
        """Logits (seqs, vocab) of a decode step: fill the buffers, replay (or run) the bucket.

        The result is a view of the bucket's output buffer: use it before the next step.
        """
        batch = layout.num_seqs
        bucket = self.bucket(batch)
        self._load(layout, bucket)
        self.steps += 1
        if self.graphs:
            self.graphs[bucket].replay()
            return self.outputs[bucket][:batch]
        return self.forward(bucket)[:batch]

    def _load(self, layout: StepLayout, bucket: int) -> None:
        """Copy the step's inputs into the first `bucket` rows of the buffers (one host->device copy)."""
        pad = bucket - layout.num_seqs
        width = layout.block_tables.shape[1]
        tables = np.full((bucket, width), self.runner.scratch_block, dtype=np.int32)
        tables[: layout.num_seqs] = layout.block_tables
        positions = layout.positions
        zeros = np.zeros(positions.shape[:-1] + (pad,), dtype=np.int64)
        arrays = {
            "input_ids": np.concatenate([layout.input_ids, np.zeros(pad, dtype=np.int64)]),
            "positions": np.concatenate([positions, zeros], axis=-1),
            "slot_mapping": np.concatenate([layout.slot_mapping, np.full(pad, self.scratch_slot, dtype=np.int64)]),
            "context_lens": np.concatenate([layout.context_lens, np.ones(pad, dtype=np.int32)]),
            "block_tables": tables,
        }
        tensors = pack_to_device(arrays, self.runner.device)
        static = self.static
        static["input_ids"][:bucket].copy_(tensors["input_ids"])
        static["positions"][..., :bucket].copy_(tensors["positions"])
        static["slot_mapping"][:bucket].copy_(tensors["slot_mapping"])
        static["context_lens"][:bucket].copy_(tensors["context_lens"])
        static["block_tables"][:bucket, :width].copy_(tensors["block_tables"])

    @torch.inference_mode()
    def forward(self, bucket: int) -> torch.Tensor:
        """The decode forward over the first `bucket` rows of the static buffers: logits (bucket, vocab).

        Under inference mode, captured or not: a graph captured with autograd on keeps each bucket's
        autograd graph alive in the pool, and the KV cache it writes becomes a non-leaf.
        """
        runner, static = self.runner, self.static
        views = {name: static[name][:bucket] for name in ("slot_mapping", "context_lens", "block_tables")}
        views["cu_seqlens_q"] = static["cu_seqlens_q"][: bucket + 1]
        meta = runner.attention.graph_metadata(views, bucket, self.max_context, self.workspace)
        batch = ForwardBatch(input_ids=static["input_ids"][:bucket], positions=static["positions"][..., :bucket])
        hidden = runner.adapter.forward(batch, PagedAttention(runner.k_cache, runner.v_cache, meta, runner.attention))
        return runner.adapter.compute_logits(hidden).float()

    def _capture(self) -> None:
        """Capture every bucket, largest first, sharing one memory pool (as nano-vllm does)."""
        pool = None
        for bucket in reversed(self.buckets):
            self.forward(bucket)  # warm-up: compiles this bucket's kernel variants outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[bucket] = self.forward(bucket)
            pool = graph.pool() if pool is None else pool
            self.graphs[bucket] = graph
        torch.cuda.synchronize()
        if self.workspace is not None:
            self.workspace.freeze()
