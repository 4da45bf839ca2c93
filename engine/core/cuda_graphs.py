"""Decode steps replayed from CUDA graphs captured at fixed batch sizes (nano-vllm's scheme).

A decode step launches a few hundred small kernels; on a GPU their launch cost rivals the work.
So at start-up the decode forward is captured once per batch bucket (1, 2, 4, 8, 16, 32, ...) and
context bucket (an eighth, a quarter, a half and all of the longest context) over static input
buffers, and a decode step of n sequences copies its inputs into the buffers and replays the
smallest batch bucket >= n at the smallest context bucket >= its longest context. The context
bucket is what the attention backend plans its kernels for (the Triton decode's split-K size): a
graph planned for the model's whole context would launch a handful of programs for a 4k batch.
Every graph writes its logits into one static buffer, so graphs keep no outputs of their own.
Padding rows write their K/V to the runner's scratch block and read one key from it, so they
never touch a real sequence's cache.

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

__all__ = ["DecodeGraphs", "batch_buckets", "context_buckets"]


def context_buckets(max_context: int, block_size: int) -> list[int]:
    """An eighth, a quarter, a half and all of `max_context`, each rounded up to whole blocks."""
    sizes = {-(-max(1, max_context // d) // block_size) * block_size for d in (8, 4, 2)}
    return sorted({min(size, max_context) for size in sizes} | {max_context})


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
        self.contexts = context_buckets(self.max_context, block_size)
        self.workspace = runner.attention.graph_workspace(self.buckets, self.contexts)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # (batch, context) bucket -> graph
        self.logits: torch.Tensor | None = None  # (max_batch, vocab) float32: every graph's output, captured
        self.steps = 0  # decode steps run through the static buffers
        if capture:
            self._capture()

    def bucket(self, batch: int) -> int:
        return next(b for b in self.buckets if b >= batch)

    def context_bucket(self, context: int) -> int:
        return next(c for c in self.contexts if c >= context)

    def can_run(self, layout: StepLayout) -> bool:
        """A decode step where every sequence samples, within the captured sizes."""
        return (layout.all_decode and layout.samples_every_row and not layout.mm_chunks
                and layout.num_seqs <= self.max_batch and layout.max_context_len <= self.max_context)

    def run(self, layout: StepLayout) -> torch.Tensor:
        """Logits (seqs, vocab) of a decode step: fill the buffers, replay (or run) the bucket.

        The result is a view of the bucket's output buffer: use it before the next step.
        """
        batch = layout.num_seqs
        bucket, context = self.bucket(batch), self.context_bucket(layout.max_context_len)
        self._load(layout, bucket)
        self.steps += 1
        if self.graphs:
            self.graphs[(bucket, context)].replay()
            return self.logits[:batch]
        return self.forward(bucket, context)[:batch]

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
    def forward(self, bucket: int, context: int | None = None) -> torch.Tensor:
        """The decode forward over the first `bucket` rows of the static buffers: logits (bucket, vocab).

        `context` is the context bucket the attention kernels are planned for (default: the longest).

        Under inference mode, captured or not: a graph captured with autograd on keeps each bucket's
        autograd graph alive in the pool, and the KV cache it writes becomes a non-leaf.
        """
        runner, static = self.runner, self.static
        views = {name: static[name][:bucket] for name in ("slot_mapping", "context_lens", "block_tables")}
        views["cu_seqlens_q"] = static["cu_seqlens_q"][: bucket + 1]
        meta = runner.attention.graph_metadata(views, bucket, context or self.max_context, self.workspace)
        batch = ForwardBatch(input_ids=static["input_ids"][:bucket], positions=static["positions"][..., :bucket])
        hidden = runner.adapter.forward(batch, PagedAttention(runner.k_cache, runner.v_cache, meta, runner.attention))
        return runner.adapter.compute_logits(hidden).float()

    def _capture(self) -> None:
        """Capture every (batch, context) bucket, largest first, sharing one memory pool (as nano-vllm does)."""
        pool = None
        vocab = self.runner.adapter.shape.vocab_size
        self.logits = torch.zeros(self.max_batch, vocab, dtype=torch.float32, device=self.runner.device)
        for context in reversed(self.contexts):
            for bucket in reversed(self.buckets):
                self.forward(bucket, context)  # warm-up: compiles this shape's kernel variants outside the capture
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self.logits[:bucket].copy_(self.forward(bucket, context))
                pool = graph.pool() if pool is None else pool
                self.graphs[(bucket, context)] = graph
        torch.cuda.synchronize()
        if self.workspace is not None:
            self.workspace.freeze()
