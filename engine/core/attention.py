"""Attention over the paged KV cache: backends as objects, each building only the metadata it needs.

The cache of each layer is `(num_blocks, block_size, kv_heads, head_dim)`; a token's slot is
`block_table[i // block_size] * block_size + i % block_size` (`kernels/paged_attention.py` has the
contract and the float32 reference). Each layer writes its new K/V into their slots, then every
query attends to its sequence's cache. One step runs like this:

    layout = build_layout(chunks, block_size)                    # host numpy, engine/core/step_layout.py
    tensors = pack_to_device({...common, **backend.arrays(layout)}, device)   # one copy
    meta = backend.metadata(tensors, layout)                     # once per step, shared by all layers
    out = PagedAttention(k_cache, v_cache, meta, backend)(layer, q, k, v, window)

Backends (`resolve_backend` picks one; `make_backend` builds it):
- `triton` (GPU): our Triton kernels (`kernels/paged_attention_triton.py`): varlen prefill over the
  block tables with the causal mask computed in the kernel, split-K decode. No mask tensor.
- `flash_attn` (GPU, when installed): `flash_attn_varlen_func` / `flash_attn_with_kvcache` with
  block tables; flash-attn's paged kernels need block_size % 256 == 0.
- `sdpa` (CPU reference): batched SDPA for decode tokens over gathered caches, one SDPA call per
  prefill chunk with a causal mask aligned to the end of its context (built on the host: CPU only).
- `numba` (CPU, float32 or bfloat16, accumulating in float32): as `sdpa`, but decode tokens read
  the blocks in place (`kernels/paged_attention_numba.py`).
GPU paths build no dense mask and no padded copy of the cache.

A layer may pass `window` (sliding-window attention, e.g. Gemma-3's local layers): each query then
sees only the last `window` positions up to itself. Such layers keep their KV in a pool of their own
that frees what falls out of every window (engine/core/window_blocks.py); their block tables point out-of-
window entries at a null block that the window keeps every kernel from reading into a result.

Models whose image tokens attend to each other in both directions (`ModelShape.bidirectional_images`,
Gemma-3) send `image_spans`: per row of an image its [start, end) in the sequence. A row then sees the
keys it sees causally and every key of its image, and a sliding-window layer bounds both from below by its
window (HF's masks: full layers OR(causal, same image), sliding AND(window, OR(causal, same image))): one
contiguous range, from the causal start to the image's end. Every backend applies it (flash-attn cannot,
and is refused); the scheduler keeps each image in one chunk, so its keys are written before any of its
rows reads them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from engine.core.step_layout import StepLayout
from models.base import ModelShape
from tools.errors import DossierError, missing_dependency

__all__ = ["AttentionBackend", "AttentionMetadata", "PagedAttention", "PrefillSpan", "make_backend", "resolve_backend"]


@dataclass(slots=True)
class PrefillSpan:
    """CPU backends: one sequence's chunk of more than one query token."""

    token_start: int  # first row of the chunk in the packed batch
    length: int  # query tokens in the chunk
    kv_len: int  # context length after this chunk (cached + chunk)
    block_table: torch.Tensor  # (blocks,) block ids of the sequence
    mask: torch.Tensor | None  # (length, kv_len) bool, None when the chunk is the whole context
    images: tuple[torch.Tensor, torch.Tensor] | None = None  # per query row its image's [start, end), (0, 0) text


@dataclass(slots=True)
class AttentionMetadata:
    """Where each token of a packed batch writes and reads KV; built once per step, read by every layer."""

    slot_mapping: torch.Tensor  # (tokens,) int64 cache slot of each new token
    num_seqs: int  # sequences (chunks) in the step
    max_q_len: int  # longest chunk, tokens (host int: sizes kernel grids)
    max_context_len: int  # longest context after its chunk, tokens
    all_decode: bool  # every chunk is one token, rows 0..n-1 in sequence order
    # (2, tokens) int32 per row its image's [start, end) in its sequence, seen in both directions; None: causal
    image_spans: torch.Tensor | None = None
    # GPU backends: compact per-sequence tensors
    cu_seqlens_q: torch.Tensor | None = None  # (seqs + 1,) int32 first query row of each sequence
    context_lens: torch.Tensor | None = None  # (seqs,) int32 keys after the chunk
    block_tables: torch.Tensor | None = None  # (seqs, max_blocks) int32
    cu_seqlens_k: torch.Tensor | None = None  # (seqs + 1,) int32 cumulative context lengths (flash-attn)
    split_len: int = 0  # triton decode: keys per split
    max_splits: int = 0  # triton decode: grid size along the context
    workspace: object | None = None  # triton decode: partial-softmax buffers (a CUDA graph keeps its own)
    # CPU backends
    decode_rows: torch.Tensor | None = None  # (decodes,) rows of single-token chunks
    decode_block_tables: torch.Tensor | None = None  # (decodes, max_blocks) block tables of those rows
    decode_lens: torch.Tensor | None = None  # (decodes,) context length of each decode token
    decode_mask: torch.Tensor | None = None  # (decodes, 1, 1, max_blocks * block_size) bool, sdpa only
    # numba: the decoded chunks grouped by their row count R, as (R, their rows in decode order (n * R,), block
    # tables (n, max_blocks), key counts of their last rows (n,)): each chunk's rows go to the kernel as one entry
    decode_stacks: list = field(default_factory=list)
    row_seq: torch.Tensor | None = None  # (tokens,) sequence of each row, batch-invariant backend
    row_tiles: torch.Tensor | None = None  # (tiles + 1,) first row of each tile of one sequence's rows, same
    prefills: list[PrefillSpan] = field(default_factory=list)
    window_masks: dict = field(default_factory=dict)  # sdpa: window -> masks, built on first use in a step


class AttentionBackend:
    """How one family of kernels reads the paged cache: which metadata it needs and the attention itself.

    Args:
        shape: the model's shape (KV heads, head dim).
        block_size: tokens per KV block.
        device: where the cache lives.
        dtype: the cache dtype.
    """

    name = ""
    graphs = False  # decode steps may be captured in CUDA graphs

    def __init__(self, shape: ModelShape, block_size: int, device: torch.device, dtype: torch.dtype) -> None:
        self.shape, self.block_size, self.device, self.dtype = shape, block_size, device, dtype

    def arrays(self, layout: StepLayout) -> dict[str, np.ndarray]:
        """Host arrays this backend needs on the device this step (slot mapping is always sent)."""
        return {}

    def metadata(self, tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
        """The step's metadata from the device tensors (and host scalars of `layout`)."""
        return _common(tensors, layout)

    def graph_metadata(self, static: dict[str, torch.Tensor], batch: int, max_context: int,
                       workspace) -> AttentionMetadata:
        """Metadata of a decode step over the CUDA-graph buffers (device tensors only: nothing read back).

        Args:
            static: "slot_mapping", "cu_seqlens_q", "context_lens", "block_tables" for `batch` rows.
            batch: rows, padding included.
            max_context: the buffers' context capacity, tokens (fixes kernel grids for every replay).
            workspace: what `graph_workspace` returned.
        """
        return AttentionMetadata(
            slot_mapping=static["slot_mapping"], num_seqs=batch, max_q_len=1, max_context_len=max_context,
            all_decode=True, cu_seqlens_q=static["cu_seqlens_q"], context_lens=static["context_lens"],
            block_tables=static["block_tables"],
        )

    def graph_workspace(self, buckets: list[int], contexts: list[int]):
        """Buffers the decode kernels need for every batch and context bucket, reserved before capture (None: none
        needed)."""
        return None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, window: int | None) -> torch.Tensor:
        """q (tokens, heads, D), this step's k/v (tokens, kv_heads, D), one layer's caches -> (tokens, heads, D)."""
        raise NotImplementedError


def _common(tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
    return AttentionMetadata(slot_mapping=tensors["slot_mapping"], num_seqs=layout.num_seqs,
                             max_q_len=layout.max_q_len, max_context_len=layout.max_context_len,
                             all_decode=layout.all_decode, image_spans=tensors.get("image_spans"))


class PagedAttention:
    """The `AttentionFn` handed to a model adapter for one step: writes then reads the paged cache."""

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                 backend: AttentionBackend) -> None:
        # k_cache, v_cache: (layers, num_blocks, block_size, kv_heads, head_dim)
        self.k_cache = k_cache
        self.v_cache = v_cache
        self.meta = meta
        self.backend = backend
        self.recurrent = None  # a hybrid model's linear-attention states for the step (engine/core/recurrent_state.py)
        self.layer_meta: dict[int, AttentionMetadata] = {}  # layers whose cache has its own block tables

    def use_for(self, layers, meta: AttentionMetadata) -> None:
        """`layers` read and write their cache through `meta` (sliding-window layers with a pool of their own)."""
        self.layer_meta.update(dict.fromkeys(layers, meta))

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 window: int | None = None, write: bool = True) -> torch.Tensor:
        k_cache, v_cache = self.k_cache[layer], self.v_cache[layer]
        meta = self.layer_meta.get(layer, self.meta)
        if write:  # else `layer` wrote k and v earlier in this step (a KV-sharing layer reads them)
            kv_heads, head_dim = k_cache.shape[-2:]
            k_cache.view(-1, kv_heads, head_dim).index_copy_(0, meta.slot_mapping, k)
            v_cache.view(-1, kv_heads, head_dim).index_copy_(0, meta.slot_mapping, v)
        return self.backend.forward(q, k, v, k_cache, v_cache, meta, window)


# name -> "module:Class"; a new backend is one class and one line here
BACKENDS = {
    "sdpa": "engine.core.attention_cpu:SdpaBackend",
    "numba": "engine.core.attention_cpu:NumbaBackend",
    "triton": "engine.core.attention_gpu:TritonBackend",
    "flash_attn": "engine.core.attention_gpu:FlashAttnBackend",
}


def make_backend(name: str, shape: ModelShape, block_size: int, device: torch.device,
                 dtype: torch.dtype) -> AttentionBackend:
    """Build the backend `name` (already resolved) for a model and cache."""
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(shape, block_size, device, dtype)


def triton_interpreted() -> bool:
    """TRITON_INTERPRET=1: Triton kernels run on the CPU as numpy (tests only; 100-450x slower than torch)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def resolve_backend(requested: str, device: str, block_size: int, dtype: torch.dtype = torch.float32) -> str:
    """Pick "triton", "flash_attn", "numba" or "sdpa" for `requested` ("auto" or one of them).

    auto: on CUDA, flash_attn when installed and block_size % 256 == 0 with fp16/bf16, else triton;
    on the CPU, numba for float32 and bfloat16 (bf16 decode through it was 1.03-2.8x bf16 SDPA's speed at
    Qwen2.5-1.5B's shapes; kernels/paged_attention_numba.py has the figures), else sdpa.
    """
    gpu_dtypes = (torch.float16, torch.bfloat16)
    if requested == "auto":
        if device == "cuda":
            usable = importlib.util.find_spec("flash_attn") is not None and block_size % 256 == 0
            return "flash_attn" if usable and dtype in gpu_dtypes else "triton"
        if dtype in (torch.float32, torch.bfloat16) and importlib.util.find_spec("numba") is not None:
            return "numba"
        return "sdpa"
    if requested == "numba":
        if device != "cpu" or dtype not in (torch.float32, torch.bfloat16):
            raise DossierError(f"attention_backend='numba' runs on the CPU in float32 or bfloat16 (got {device}, "
                               f"{dtype}); use 'sdpa' for other CPU dtypes, 'triton' on CUDA")
        if importlib.util.find_spec("numba") is None:
            raise missing_dependency("numba", "pip install numba")
        return "numba"
    if requested == "sdpa":
        if device != "cpu":
            raise DossierError("attention_backend='sdpa' is the CPU reference path; on CUDA use 'triton' or 'flash_attn'")
        return "sdpa"
    if requested == "triton":
        if device != "cuda" and not triton_interpreted():
            raise DossierError("attention_backend='triton' needs a CUDA device (or TRITON_INTERPRET=1 for tests); "
                               "use 'numba' or 'sdpa' on the CPU")
        if importlib.util.find_spec("triton") is None:
            raise missing_dependency("triton", "pip install triton")
        return "triton"
    if requested == "flash_attn":
        if device != "cuda":
            raise DossierError("attention_backend='flash_attn' needs a CUDA device; use 'numba' or 'sdpa' on the CPU")
        if dtype not in gpu_dtypes:
            raise DossierError(f"attention_backend='flash_attn' needs float16 or bfloat16 (got {dtype}); use 'triton'")
        if block_size % 256:
            raise DossierError(f"attention_backend='flash_attn' needs block_size to be a multiple of 256 (got {block_size})")
        if importlib.util.find_spec("flash_attn") is None:
            raise missing_dependency("flash-attn", "pip install 'dossier[gpu]'  (or: pip install flash-attn)")
        return "flash_attn"
    raise DossierError(f"attention_backend {requested!r} is not one of auto, {', '.join(BACKENDS)}")
