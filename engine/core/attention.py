"""Attention over the paged KV cache: an SDPA reference path, a CPU decode kernel, flash-attn on GPU.

The cache of each layer is `(num_blocks, block_size, kv_heads, head_dim)`; a token's
slot is `block_table[i // block_size] * block_size + i % block_size`. Each step the
layer's new K/V are scattered into their slots, then every query attends to its
sequence's cache.

- `sdpa` (reference, CPU and GPU): decode tokens of all sequences in one batched SDPA
  call over their gathered, padded caches (query heads grouped by KV head, so GQA needs
  no copy of K/V); each prefill chunk in its own SDPA call with a causal mask aligned
  to the end of its context.
- `numba` (CPU, float32): as `sdpa`, except decode tokens go through the numba kernel of
  `engine/cpu_attention.py`, which reads the blocks in place instead of gathering a
  padded copy (decode on a CPU is bound by reading the cache).
- `flash_attn` (GPU, when installed): one `flash_attn_varlen_func` call with block
  tables reads the paged cache in place. Needs block_size % 256 == 0. Not exercised
  by the CPU test suite: it runs only on a CUDA machine with flash-attn.

A layer may pass `window` (sliding-window attention, e.g. Gemma-3's local layers): each
query then sees only the last `window` cache rows up to itself (key index > query index
- window, as transformers' sliding-window mask). The cache still holds every row.
"""

import importlib.util
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from tools.errors import DossierError, missing_dependency

__all__ = ["AttentionMetadata", "PagedAttention", "PrefillSpan", "resolve_backend"]


def resolve_backend(requested: str, device: str, block_size: int, dtype: torch.dtype = torch.float32) -> str:
    """Pick "flash_attn", "numba" or "sdpa" for `requested` ("auto" or one of them)."""
    has_flash = importlib.util.find_spec("flash_attn") is not None
    if requested == "numba":
        if device != "cpu" or dtype != torch.float32:
            raise DossierError(f"attention_backend='numba' runs on the CPU in float32 (got {device}, {dtype})")
        if importlib.util.find_spec("numba") is None:
            raise missing_dependency("numba", "pip install numba")
        return "numba"
    if requested == "flash_attn":
        if device != "cuda":
            raise DossierError("attention_backend='flash_attn' needs a CUDA device; use 'sdpa' on the CPU")
        if not has_flash:
            raise missing_dependency("flash-attn", "pip install 'dossier[gpu]'  (or: pip install flash-attn)")
        return "flash_attn"
    if requested == "auto" and device == "cuda" and has_flash and block_size % 256 == 0:
        return "flash_attn"
    if requested == "auto" and device == "cpu" and dtype == torch.float32 and importlib.util.find_spec("numba"):
        return "numba"
    return "sdpa"


@dataclass(slots=True)
class PrefillSpan:
    """One sequence's chunk of more than one query token."""

    token_start: int  # first row of the chunk in the packed batch
    length: int  # query tokens in the chunk
    kv_len: int  # context length after this chunk (cached + chunk)
    block_table: torch.Tensor  # (blocks,) int64
    mask: torch.Tensor | None  # (length, kv_len) bool, None when the chunk is the whole context


@dataclass(slots=True)
class AttentionMetadata:
    """Where each token of a packed batch writes and reads KV; built once per step."""

    slot_mapping: torch.Tensor  # (tokens,) int64 cache slot of each new token
    decode_rows: torch.Tensor | None = None  # (decodes,) rows of single-token chunks in the batch
    decode_block_tables: torch.Tensor | None = None  # (decodes, max_blocks) int64, padded with 0
    decode_lens: torch.Tensor | None = None  # (decodes,) int64 context length of each decode token
    all_decode: bool = False  # every token of the batch is a decode token (rows 0..n-1 in order)
    decode_mask: torch.Tensor | None = None  # (decodes, 1, 1, max_blocks * block_size) bool
    prefills: list[PrefillSpan] = field(default_factory=list)
    # flash-attn varlen inputs (only built for that backend)
    cu_seqlens_q: torch.Tensor | None = None  # (seqs + 1,) int32
    cu_seqlens_k: torch.Tensor | None = None  # (seqs + 1,) int32
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    block_tables: torch.Tensor | None = None  # (seqs, max_blocks) int32


class PagedAttention:
    """The `AttentionFn` handed to a model adapter for one step: writes then reads the paged cache."""

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, backend: str) -> None:
        # k_cache, v_cache: (layers, num_blocks, block_size, kv_heads, head_dim)
        self.k_cache = k_cache
        self.v_cache = v_cache
        self.meta = meta
        self.backend = backend
        self._window_masks: dict[int | None, tuple] = {}  # window -> (decode mask, prefill masks), built once per step

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None
    ) -> torch.Tensor:
        k_cache, v_cache = self.k_cache[layer], self.v_cache[layer]
        kv_heads, head_dim = k_cache.shape[-2:]
        k_cache.view(-1, kv_heads, head_dim).index_copy_(0, self.meta.slot_mapping, k)
        v_cache.view(-1, kv_heads, head_dim).index_copy_(0, self.meta.slot_mapping, v)
        if self.backend == "flash_attn":
            return self._flash(q, k_cache, v_cache, window)
        return self._sdpa(q, k, v, k_cache, v_cache, window)

    def _masks(self, window: int | None) -> tuple[torch.Tensor | None, list[torch.Tensor | None]]:
        """(decode mask, per-prefill masks) with keys more than `window` - 1 rows before their query masked out."""
        if window in self._window_masks:
            return self._window_masks[window]
        meta = self.meta
        decode_mask, prefill_masks = meta.decode_mask, [span.mask for span in meta.prefills]
        if window is not None:
            if decode_mask is not None:
                keys = torch.arange(decode_mask.shape[-1], device=decode_mask.device)
                decode_mask = decode_mask & (keys >= (meta.decode_lens - window).unsqueeze(1))[:, None, None, :]
            for i, span in enumerate(meta.prefills):
                if span.kv_len > window:
                    device = span.block_table.device
                    queries = torch.arange(span.kv_len - span.length, span.kv_len, device=device).unsqueeze(1)
                    keys = torch.arange(span.kv_len, device=device).unsqueeze(0)
                    prefill_masks[i] = (keys <= queries) & (keys > queries - window)  # (length, kv_len)
        self._window_masks[window] = (decode_mask, prefill_masks)
        return self._window_masks[window]

    def _sdpa(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
        window: int | None = None,
    ) -> torch.Tensor:
        meta = self.meta
        decode_mask, prefill_masks = self._masks(window)
        tokens, heads, head_dim = q.shape
        kv_heads = k_cache.shape[2]
        group = heads // kv_heads
        out = torch.empty_like(q)
        if meta.decode_rows is not None and self.backend == "numba":
            from engine.core.cpu_attention import paged_decode_torch

            batch = meta.decode_rows.shape[0]
            queries = q if meta.all_decode else q[meta.decode_rows]
            queries = queries.reshape(batch, kv_heads, group, head_dim).contiguous()  # grouped per KV head
            attended = paged_decode_torch(queries, k_cache, v_cache, meta.decode_block_tables, meta.decode_lens, window)
            if meta.all_decode:
                return attended.view(tokens, heads, head_dim)
            out[meta.decode_rows] = attended.view(batch, heads, head_dim)
        elif meta.decode_rows is not None:
            batch, max_blocks = meta.decode_block_tables.shape
            span = max_blocks * k_cache.shape[1]
            flat_tables = meta.decode_block_tables.flatten()
            keys = k_cache.index_select(0, flat_tables).view(batch, span, kv_heads, head_dim).transpose(1, 2)
            values = v_cache.index_select(0, flat_tables).view(batch, span, kv_heads, head_dim).transpose(1, 2)
            queries = q[meta.decode_rows].view(batch, kv_heads, group, head_dim)  # query heads grouped per KV head
            attended = F.scaled_dot_product_attention(queries, keys, values, attn_mask=decode_mask)
            out[meta.decode_rows] = attended.reshape(batch, heads, head_dim)
        for span, mask in zip(meta.prefills, prefill_masks):
            rows = slice(span.token_start, span.token_start + span.length)
            if span.mask is None:  # the chunk is the whole context: its fresh K/V are all there is
                keys, values = k[rows].transpose(0, 1), v[rows].transpose(0, 1)  # (kv_heads, kv_len, D)
            else:
                keys = k_cache.index_select(0, span.block_table).flatten(0, 1)[: span.kv_len].transpose(0, 1)
                values = v_cache.index_select(0, span.block_table).flatten(0, 1)[: span.kv_len].transpose(0, 1)
            queries = q[rows].transpose(0, 1)  # (heads, length, D)
            attended = F.scaled_dot_product_attention(
                queries.unsqueeze(0),
                keys.unsqueeze(0),
                values.unsqueeze(0),
                attn_mask=mask,
                is_causal=mask is None,
                enable_gqa=group > 1,
            )  # (1, heads, length, D)
            out[rows] = attended[0].transpose(0, 1)
        return out

    def _flash(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, window: int | None) -> torch.Tensor:
        from flash_attn import flash_attn_varlen_func

        meta = self.meta
        return flash_attn_varlen_func(
            q,
            k_cache,
            v_cache,
            cu_seqlens_q=meta.cu_seqlens_q,
            cu_seqlens_k=meta.cu_seqlens_k,
            max_seqlen_q=meta.max_seqlen_q,
            max_seqlen_k=meta.max_seqlen_k,
            causal=True,
            window_size=(-1, -1) if window is None else (window - 1, 0),
            block_table=meta.block_tables,
        )
