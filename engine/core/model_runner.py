"""Runs one step: lays the scheduled chunks out as a flat batch, calls the adapter, returns logits.

Owns the paged KV cache tensors, the attention backend (`engine/core/attention.py`), the decode
CUDA graphs (`engine/core/cuda_graphs.py`) and, for vision-language models, the encoder cache:
the images of the step's chunks (of every session in it) are encoded before the forward, in one
batched call. Per step the host builds one compact layout (numpy; `engine/core/step_layout.py`)
and sends what the backend needs in one copy. Logits are computed only for the rows that sample
(the last token of every chunk that reaches its sequence's end), never for the whole prefill.

The cache holds one block more than the block manager hands out: a scratch block that padding
rows of a CUDA-graph batch write to and read from, so they never touch a real sequence's KV. A model
with sliding-window layers has a second cache for them (`k_window`, `v_window`), with its own pool and
block tables (engine/core/window_blocks.py): each such layer reads it through the step's second metadata.

`EngineConfig.deterministic`: the batch-invariant mode. The adapter's row-wise work runs in fixed
tiles (models/batch_invariant.py), attention through `InvariantNumbaBackend` on the CPU or
`InvariantTritonBackend` on CUDA (no CUDA graphs), and the logits in tiles too, so a sequence's logits
depend only on its own tokens. Other devices: the runner warns and runs as usual (`deterministic` False).
"""

import dataclasses
import logging

import numpy as np
import torch

from engine.core.attention import AttentionBackend, AttentionMetadata, PagedAttention, make_backend, resolve_backend
from engine.core.config import EngineConfig
from engine.core.encoder_cache import EncoderCache
from engine.core.recurrent_state import CHECKPOINT_BLOCKS, RecurrentStates, Segment, StepStates
from engine.core.kv_budget import (CPU_KV_CACHE_GIB, blocks_from_free_memory, bytes_per_block, explicit_blocks,
                                  longest_conversation, split_for_window, state_budget, window_blocks,
                                  window_bytes_per_block)
from engine.core.scheduler import Chunk
from engine.core.step_layout import StepLayout, build_layout, pack_to_device
from models.base import ForwardBatch, ModelAdapter, ModelShape, MultimodalItem, SampledRows
from models.batch_invariant import ROW_TILE, row_tile_for, row_tiles, set_batch_invariant
from tools.errors import DossierError, missing_dependency

__all__ = ["ModelRunner", "kv_blocks_for_budget"]

log = logging.getLogger(__name__)


def kv_blocks_for_budget(shape: ModelShape, config: EngineConfig, dtype: torch.dtype, device: str = "cpu") -> int | None:
    """Blocks of an explicitly sized pool, or None when the runner sizes it from free GPU memory."""
    return explicit_blocks(shape, config, dtype, device)


class ModelRunner:
    """The KV cache and the forward of one packed step.

    Args:
        adapter: the model.
        config: engine settings (block size, attention backend, CUDA graphs).
        num_blocks: KV blocks the block manager hands out; None (a GPU with no size given): sized from the
            memory left after a warm-up forward at the largest prefill chunk (engine/core/kv_budget.py).
        backend: an attention backend to use instead of resolving `config.attention_backend` (tests).
    """

    def __init__(self, adapter: ModelAdapter, config: EngineConfig, num_blocks: int | None,
                 backend: AttentionBackend | None = None) -> None:
        self.adapter = adapter
        self.config = config
        shape = adapter.shape
        self.device = next(adapter.parameters()).device
        self.dtype = adapter.dtype
        self.block_size = config.block_size
        # hybrid models (Qwen3.5): per-sequence states of the linear-attention layers (engine/core/recurrent_state.py)
        linear_layers = sum(1 for layer in getattr(adapter, "layers", ()) if getattr(layer, "recurrent", False))
        self.states_budget = state_budget(shape, config, self.dtype, self.device.type) if linear_layers else None
        self.recurrent = None
        if linear_layers:
            self.recurrent = RecurrentStates(linear_layers, self.states_budget.checkpoint_bytes,
                                             self.states_budget.slots)
        self.deterministic = config.deterministic and self.device.type in ("cpu", "cuda") and self.recurrent is None
        if config.deterministic and self.recurrent is not None:
            log.warning("deterministic (batch-invariant) inference does not cover linear-attention layers yet: their "
                        "chunked prefill depends on how a prompt was split (run.json records deterministic: false)")
        elif config.deterministic and not self.deterministic:
            log.warning("deterministic (batch-invariant) inference is built for the CPU and CUDA; on %s the "
                        "logits may depend on batching (run.json records deterministic: false)", self.device.type)
        if self.deterministic and self.device.type == "cuda":
            _cuda_deterministic()
        self.row_tile = row_tile_for(self.dtype, self.device.type) if self.deterministic else None
        set_batch_invariant(adapter, self.row_tile)
        if backend is None and self.deterministic:
            backend = _invariant_backend(config, shape, self.device, self.dtype)
        if backend is None:
            name = resolve_backend(config.attention_backend, self.device.type, config.block_size, self.dtype)
            if name == "flash_attn" and shape.bidirectional_images and config.attention_backend == "auto":
                name = "triton"  # flash-attn's kernels are causal only
            backend = make_backend(name, shape, config.block_size, self.device, self.dtype)
        if shape.bidirectional_images and backend.name == "flash_attn":
            raise DossierError(f"{adapter.name}'s image tokens attend to each other in both directions, which "
                               "flash-attn's causal kernels cannot do; use attention_backend='triton' or 'auto'")
        self.attention = backend
        self.backend = backend.name
        self.encoder: EncoderCache | None = None
        if getattr(adapter, "vision", None) is not None:
            capacity = int(config.encoder_cache_gib * 2**30)
            self.encoder = EncoderCache(adapter, capacity, config.max_encoder_batch_patches)
        self.per_block = bytes_per_block(shape, config, self.dtype)
        self.window_per_block = window_bytes_per_block(shape, config, self.dtype)  # 0: no sliding-window layers
        self.sized_from = ("num_kv_blocks" if config.num_kv_blocks else "--kv-cache-gib" if config.kv_cache_gib
                           else f"the CPU default of {CPU_KV_CACHE_GIB:g} GiB")
        if num_blocks is None:
            num_blocks, window = self._blocks_from_free_memory()
            self.sized_from = f"{config.gpu_memory_utilization:.0%} of the GPU after a warm-up forward"
        else:
            window = window_blocks(shape, config, self.dtype, self.device.type, num_blocks)
        self._allocate(num_blocks, window)
        self.longest = longest_conversation(shape.max_positions, num_blocks * config.block_size, config)
        self.graphs = None
        if (self.device.type == "cuda" and config.cuda_graphs and backend.graphs and self.recurrent is None
                and not self.window_blocks):  # the graphs replay one block table per sequence
            self.graphs = self._capture_graphs()

    @property
    def max_context(self) -> int:
        """Longest context a sequence can reach: the model's limit or the pool's (or max_model_len), tokens."""
        return self.longest

    def _allocate(self, num_blocks: int, window: int = 0) -> None:
        """The KV cache of `num_blocks` blocks plus the scratch block (padding rows of graph batches live there), and
        the sliding-window layers' cache of `window` blocks plus its null block (engine/core/window_blocks.py)."""
        shape = self.adapter.shape
        self.num_blocks, self.window_blocks = num_blocks, window
        self.scratch_block = num_blocks
        self.k_cache = self.v_cache = self.k_layers = self.v_layers = None  # free a previous (warm-up) cache first
        self.k_window = self.v_window = None
        full = shape.full_layers if window else tuple(range(shape.num_layers)) if shape.kv_layers is None else shape.kv_layers
        cache_shape = (len(full), num_blocks + 1, self.block_size, shape.num_kv_heads, shape.head_dim)
        self.k_cache = torch.zeros(cache_shape, dtype=self.dtype, device=self.device)
        self.v_cache = torch.zeros(cache_shape, dtype=self.dtype, device=self.device)
        # what PagedAttention indexes by layer: the tensors themselves, or per layer its cache (None where a
        # hybrid model's layer keeps a state instead of KV; the window cache's row for a sliding-window layer)
        self.k_layers, self.v_layers = self.k_cache, self.v_cache
        if shape.kv_layers is None and not window:
            return
        k_rows = {layer: self.k_cache[j] for j, layer in enumerate(full)}
        v_rows = {layer: self.v_cache[j] for j, layer in enumerate(full)}
        if window:
            window_shape = (len(shape.window_layers), window + 1, self.block_size, *shape.window_kv_shape)
            self.k_window = torch.zeros(window_shape, dtype=self.dtype, device=self.device)
            self.v_window = torch.zeros(window_shape, dtype=self.dtype, device=self.device)
            k_rows.update({layer: self.k_window[j] for j, layer in enumerate(shape.window_layers)})
            v_rows.update({layer: self.v_window[j] for j, layer in enumerate(shape.window_layers)})
        self.k_layers = [k_rows.get(i) for i in range(shape.num_layers)]
        self.v_layers = [v_rows.get(i) for i in range(shape.num_layers)]

    def _warm_up_tower(self) -> None:
        """Encode one image at the family's largest size, so the pool leaves room for the tower's activations."""
        dummy = _tower_warm_up(self.adapter)
        if dummy is not None:
            self.adapter.visual(dummy[0], grid_thw=dummy[1])

    @torch.inference_mode()
    def _blocks_from_free_memory(self) -> tuple[int, int]:
        """Run one prefill of `max_num_batched_tokens` tokens on a temporary cache (and, for a vision model, encode one
        image at its largest size), then size the pool from what the card has left (the activation peak, the decode
        graphs' logits and the encoder cache kept free). Returns (blocks, sliding-window layers' blocks)."""
        tokens = self.config.max_num_batched_tokens
        warm_blocks = -(-tokens // self.block_size) + 1
        self._allocate(warm_blocks, warm_blocks if self.window_per_block else 0)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        layout = _warm_up_layout(tokens, self.block_size, self.adapter.shape.position_dims)
        if self.window_per_block:  # the sliding-window layers' warm-up cache has the same blocks
            layout.window_block_tables, layout.window_slot_mapping = layout.block_tables, layout.slot_mapping
        self.forward_layout(layout)
        self._warm_up_tower()
        torch.cuda.synchronize()
        activation_peak = torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()
        self.k_cache = self.v_cache = self.k_layers = self.v_layers = self.k_window = self.v_window = None
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        graphs = self.config.cuda_graphs and self.attention.graphs
        batch = min(self.config.max_num_seqs, self.config.cuda_graph_max_batch)
        reserved = (batch * self.adapter.shape.vocab_size * 4 + 256 * 2**20) if graphs else 0  # logits + pool slack
        if self.states_budget is not None:  # a hybrid model's states and checkpoints come from the same memory
            reserved += self.states_budget.slots * self.adapter.shape.state_bytes + self.states_budget.checkpoint_bytes
        if self.encoder is not None:
            reserved += int(self.config.encoder_cache_gib * 2**30)
        per_block = self.per_block + self.window_per_block
        blocks = blocks_from_free_memory(total, free, activation_peak, reserved, per_block,
                                         self.config.gpu_memory_utilization)
        log.info("KV pool sized from free GPU memory: %d blocks (free %.1f of %.1f GiB, activation peak %.2f GiB, "
                 "reserved %.2f GiB)", blocks, free / 2**30, total / 2**30, activation_peak / 2**30, reserved / 2**30)
        if not self.window_per_block:
            return blocks, 0
        return split_for_window(self.adapter.shape, self.config, self.dtype, blocks * per_block)

    @torch.inference_mode()
    def _capture_graphs(self):
        from engine.core.cuda_graphs import DecodeGraphs

        try:
            return DecodeGraphs(self, min(self.config.max_num_seqs, self.config.cuda_graph_max_batch), capture=True)
        except Exception as error:  # a model op that cannot be captured (e.g. a quantised matmul): run eagerly
            log.warning("CUDA graph capture failed (%s: %s); decode steps run eagerly", type(error).__name__, error)
            torch.cuda.synchronize()
            return None

    @torch.inference_mode()
    def run(self, chunks: list[Chunk]) -> torch.Tensor:
        """Forward the chunks; return float32 logits (sampling chunks, vocab) in chunk order."""
        shape = self.adapter.shape
        layout = build_layout(chunks, self.block_size, shape.position_dims, window=bool(self.window_blocks),
                              bidirectional=shape.bidirectional_images)
        if self.graphs is not None and self.graphs.can_run(layout):
            return self.graphs.run(layout)
        states = None
        if self.recurrent is not None:
            states = self.recurrent.step([self._segment(int(row), chunk) for row, chunk
                                          in zip(layout.cu_seqlens_q[:-1], chunks)])
        logits = self.forward_layout(layout, _pending_items(chunks), states)
        if self.recurrent is not None:
            self.recurrent.trim()
        return logits

    def _segment(self, row: int, chunk: Chunk) -> Segment:
        """A chunk as the linear layers see it, with the block keys of its resume point and its checkpoints."""
        seq, size = chunk.request.seq, self.block_size
        keys = seq.block_hashes  # registered by the scheduler for the blocks this step fills (prefix caching on)
        start, end = chunk.start, chunk.start + chunk.length
        resume = keys[start // size - 1] if start and start % size == 0 and start // size <= len(keys) else None
        every = CHECKPOINT_BLOCKS * size
        points = tuple((p, keys[p // size - 1]) for p in range(-(-(start + 1) // every) * every, end + 1, every)
                       if p // size <= len(keys))
        return Segment(row, chunk.length, seq.seq_id, start, resume, points)

    def forget(self, seq_id: int) -> None:
        """A sequence is gone (its session closed): free what the runner keeps for it (a hybrid model's states)."""
        if self.recurrent is not None:
            self.recurrent.forget(seq_id)

    def prepare(self, layout: StepLayout) -> tuple[dict[str, torch.Tensor], AttentionMetadata, ForwardBatch]:
        """The step's device inputs: one copy of the arrays the backend needs, then its metadata."""
        spans = _image_spans(layout)
        if spans and self.adapter.shape.bidirectional_window_only:  # the other layers see images causally
            spans, layout = {}, dataclasses.replace(layout, image_spans=None)
        arrays = {"input_ids": layout.input_ids, "positions": layout.positions, "slot_mapping": layout.slot_mapping,
                  "sample_rows": layout.sample_rows, **spans, **self.attention.arrays(layout)}
        tensors = pack_to_device(arrays, self.device)
        meta = self.attention.metadata(tensors, layout)
        batch = ForwardBatch(input_ids=tensors["input_ids"], positions=tensors["positions"], mm_chunks=layout.mm_chunks)
        return tensors, meta, batch

    def _window_metadata(self, layout: StepLayout) -> AttentionMetadata:
        """The step's metadata over the sliding-window layers' block tables and slots."""
        window = dataclasses.replace(layout, block_tables=layout.window_block_tables,
                                     slot_mapping=layout.window_slot_mapping)
        arrays = {"slot_mapping": window.slot_mapping, **_image_spans(layout), **self.attention.arrays(window)}
        return self.attention.metadata(pack_to_device(arrays, self.device), window)

    def _sampled_rows(self, layout: StepLayout, tensors: dict[str, torch.Tensor]) -> SampledRows | None:
        """For a model whose last layers serve only the sampled rows (`ModelShape.sampled_only_from`), in a step that
        does not sample every row: those rows and an attention over them alone (`ForwardBatch.sampled`)."""
        if self.adapter.shape.sampled_only_from is None or layout.samples_every_row:
            return None
        if not len(layout.sample_rows):  # nothing sampled: those layers have nothing to compute
            return SampledRows(tensors["sample_rows"], None)
        sub = _sampled_layout(layout)
        if sub is None:
            return None
        arrays = {"slot_mapping": sub.slot_mapping, **self.attention.arrays(sub)}
        attention = PagedAttention(self.k_layers, self.v_layers,
                                   self.attention.metadata(pack_to_device(arrays, self.device), sub), self.attention)
        if sub.window_block_tables is not None:
            attention.use_for(self.adapter.shape.window_layers, self._window_metadata(sub))
        return SampledRows(tensors["sample_rows"], attention)

    def forward_layout(self, layout: StepLayout, pending: list[MultimodalItem] = (),
                       states: StepStates | None = None) -> torch.Tensor:
        """The eager step: prepare, the adapter's forward, logits of the sampled rows (float32).

        `states`: a hybrid model's linear-attention states for this step's chunks (`attention.recurrent`)."""
        tensors, meta, batch = self.prepare(layout)
        if getattr(self.adapter, "batch_invariant_tile", None) != self.row_tile:  # another engine shares the adapter
            set_batch_invariant(self.adapter, self.row_tile)
        if batch.mm_chunks:
            self.encoder.fill(batch.mm_chunks, list(pending))
        attention = PagedAttention(self.k_layers, self.v_layers, meta, self.attention)
        if layout.window_block_tables is not None:  # the sliding-window layers read their own pool's tables
            attention.use_for(self.adapter.shape.window_layers, self._window_metadata(layout))
        if self.recurrent is not None and states is None:  # a warm-up layout: its sequences start at 0, throwaway
            starts = layout.context_lens - np.diff(layout.cu_seqlens_q)
            states = RecurrentStates().step([Segment(int(row), int(length), -1 - i, int(start)) for i, (row, length, start)
                                             in enumerate(zip(layout.cu_seqlens_q[:-1], np.diff(layout.cu_seqlens_q),
                                                              starts))])
        attention.recurrent = states
        batch.sampled = self._sampled_rows(layout, tensors)
        hidden = self.adapter.forward(batch, attention)
        if not len(layout.sample_rows):
            return torch.empty(0, self.adapter.shape.vocab_size)
        if not layout.samples_every_row and batch.sampled is None:  # (else the forward gave those rows alone)
            hidden = hidden[tensors["sample_rows"]]
        if self.deterministic:
            return row_tiles(hidden, self.adapter.compute_logits, ROW_TILE).float()
        return self.adapter.compute_logits(hidden).float()


def _sampled_layout(layout: StepLayout) -> StepLayout | None:
    """The step as the layers that serve only the sampled rows see it: one query per sampled row, over its whole
    sequence (its context after the chunk); None when a sampled row is not its chunk's last (it would not see
    all its sequence's keys)."""
    rows, cu = layout.sample_rows, layout.cu_seqlens_q
    seqs = np.searchsorted(cu[1:], rows, side="right")
    if not np.array_equal(cu[seqs + 1] - 1, rows):
        return None
    count, context = len(rows), layout.context_lens[seqs]
    window = layout.window_block_tables is not None
    return StepLayout(
        input_ids=layout.input_ids[rows], positions=layout.positions[..., rows], slot_mapping=layout.slot_mapping[rows],
        cu_seqlens_q=np.arange(count + 1, dtype=cu.dtype), context_lens=context, block_tables=layout.block_tables[seqs],
        sample_rows=np.arange(count, dtype=np.int64), max_q_len=1, max_context_len=int(context.max()),
        window_block_tables=layout.window_block_tables[seqs] if window else None,
        window_slot_mapping=layout.window_slot_mapping[rows] if window else None)


def _image_spans(layout: StepLayout) -> dict[str, np.ndarray]:
    """The step's image spans for the backends, when a bidirectional model's step has image rows."""
    return {} if layout.image_spans is None else {"image_spans": layout.image_spans}


def _cuda_deterministic() -> None:
    """torch's deterministic algorithms where they apply (index_add, scatter, ...) and cuBLAS's fixed workspace.

    Each fixed-shape product is then computed the same way every call; batch invariance itself comes from the
    row tiles and the attention backend. The workspace variable must be set before cuBLAS makes its handle.
    """
    import os

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)


def _invariant_backend(config: EngineConfig, shape: ModelShape, device: torch.device,
                       dtype: torch.dtype) -> AttentionBackend:
    """The batch-invariant attention: on the CPU every query row through the numba kernel (float32 or bfloat16);
    on CUDA (or with attention_backend "triton", e.g. interpreted on the CPU) every row through the Triton
    varlen kernel (`InvariantTritonBackend`)."""
    import importlib.util

    from engine.core.attention_cpu import InvariantNumbaBackend

    if device.type == "cuda" or config.attention_backend == "triton":
        if importlib.util.find_spec("triton") is None:
            raise missing_dependency("triton", "pip install triton")
        from engine.core.attention_gpu import InvariantTritonBackend

        if config.attention_backend not in ("auto", "triton"):
            raise DossierError(f"deterministic inference on a GPU attends through the Triton varlen kernel; "
                               f"attention_backend {config.attention_backend!r} cannot be batch-invariant (use "
                               f"'auto' or 'triton', or turn --no-deterministic)")
        return InvariantTritonBackend(shape, config.block_size, device, dtype)
    if config.attention_backend not in ("auto", "numba"):
        raise DossierError(f"deterministic inference attends through the numba kernel; attention_backend "
                           f"{config.attention_backend!r} cannot be batch-invariant (use 'auto', or turn "
                           f"--no-deterministic)")
    if dtype not in (torch.float32, torch.bfloat16):
        raise DossierError(f"deterministic inference runs in float32 or bfloat16 on the CPU (got {dtype}); pass "
                           f"--dtype float32, or --no-deterministic")
    if importlib.util.find_spec("numba") is None:
        raise missing_dependency("numba", "pip install numba")
    return InvariantNumbaBackend(shape, config.block_size, device, dtype)


def _pending_items(chunks: list[Chunk]) -> list[MultimodalItem]:
    """Images of the step's sequences that lie beyond this step's chunks (still to be prefilled)."""
    pending = []
    for chunk in chunks:
        stop = chunk.start + chunk.length
        pending.extend(item for start, item in chunk.request.seq.mm_items if start >= stop)
    return pending


def _tower_warm_up(adapter) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(pixel_values, grid_thw) of one image at the family's largest size, or None without a vision tower."""
    vision = getattr(adapter, "vision", None)
    if getattr(adapter, "visual", None) is None or vision is None:
        return None
    sizing = vision.sizing
    side = max(sizing.merge_size, int((sizing.max_pixels // sizing.patch_size**2) ** 0.5) // sizing.merge_size
               * sizing.merge_size)  # patches per side of a square image at max_pixels
    width = 3 * sizing.temporal_patch_size * sizing.patch_size**2  # channels x frames x patch pixels
    tower = next(adapter.visual.parameters())
    return (torch.zeros(side * side, width, dtype=tower.dtype, device=tower.device),
            torch.tensor([[1, side, side]], device=tower.device))


def _warm_up_layout(tokens: int, block_size: int, position_dims: int) -> StepLayout:
    """One sequence prefilling `tokens` tokens from position 0 into blocks 0.. of a cache (the profiling step)."""
    positions = np.arange(tokens, dtype=np.int64)
    if position_dims > 1:
        positions = np.tile(positions, (position_dims, 1))
    blocks = -(-tokens // block_size)
    return StepLayout(input_ids=np.zeros(tokens, dtype=np.int64), positions=positions,
                      slot_mapping=np.arange(tokens, dtype=np.int64), cu_seqlens_q=np.array([0, tokens], dtype=np.int32),
                      context_lens=np.array([tokens], dtype=np.int32),
                      block_tables=np.arange(blocks, dtype=np.int32)[None, :], sample_rows=np.array([tokens - 1]),
                      max_q_len=tokens, max_context_len=tokens)
