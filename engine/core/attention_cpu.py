"""The CPU attention backends: `sdpa` (the reference) and `numba` (decode reads the blocks in place).

- Decode tokens (single-token chunks): `sdpa` gathers each sequence's blocks into a padded copy
  and runs one batched SDPA call (query heads grouped per KV head, so GQA copies no K/V); `numba`
  runs the kernel of `kernels/paged_attention_numba.py` over the blocks in place (decode on a CPU is
  bound by reading the cache).
- Prefill chunks: one SDPA call each, with a causal mask aligned to the end of the chunk's context
  when it continues cached tokens (built on the host once per step; a CPU path only). A chunk over cached
  tokens goes through torch's flash kernel in two unmasked parts (`_continued_prefill`); on `numba`, in bf16
  on a CPU with AVX512-BF16 and no AMX, through `kernels/prefill_attention_bf16.py` instead.
- `window` (sliding-window layers): the masks also hide keys `window` or more positions back.
- image rows of a bidirectional model (`meta.image_spans`): their chunk's mask also shows every key of
  their image (engine/core/attention.py); decode rows are generated text, never image rows.

`InvariantNumbaBackend` (the batch-invariant mode, `EngineConfig.deterministic`) runs every query
row, prefill or decode, through one kernel (`kernels/invariant_attention_numba.py`): a row's scores,
softmax and weighted sum go over keys 0..position in one fixed order and depend only on its query and
its sequence's cache, never on the chunking, the step's other rows or whether the prefix came from the
cache. A prefill chunk's rows share each key tile the kernel widens, so keys are read once per tile of
rows; at 300-token prefills the kernel is still 2.3-2.6x slower than torch's SDPA in float32 and 4-6x in
bf16 on the AMX Xeon (docs/determinism.md).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from engine.core.attention import AttentionBackend, AttentionMetadata, PrefillSpan, _common
from engine.core.step_layout import StepLayout

__all__ = ["InvariantNumbaBackend", "NumbaBackend", "SdpaBackend"]


class SdpaBackend(AttentionBackend):
    """Reference attention on the CPU with torch's SDPA."""

    name = "sdpa"
    # Chunks of at most this many tokens go through the decode path one row at a time, each row over keys
    # 0..its position (a draft-token chunk: engine/core/speculation.py); longer chunks are prefills.
    decode_rows_up_to = 1

    def _bf16_prefill_kernel(self, q: torch.Tensor, k_cache: torch.Tensor) -> bool:
        """Does a continued prefill take kernels/prefill_attention_bf16.py? Not on this torch reference path."""
        return False

    def _row_decoded(self, layout: StepLayout) -> np.ndarray:
        """Per sequence: is its chunk attended row by row on the decode path (short, and no image rows)?"""
        q_lens = np.diff(layout.cu_seqlens_q)
        short = q_lens <= self.decode_rows_up_to
        if layout.image_spans is not None and self.decode_rows_up_to > 1:
            seq_of_row = np.repeat(np.arange(layout.num_seqs), q_lens)
            imaged = np.bincount(seq_of_row[layout.image_spans[1] > 0], minlength=layout.num_seqs) > 0
            short &= ~imaged
        return short

    def arrays(self, layout: StepLayout) -> dict[str, np.ndarray]:
        q_lens = np.diff(layout.cu_seqlens_q)
        decode = np.flatnonzero(self._row_decoded(layout))
        arrays = {"block_tables": layout.block_tables.astype(np.int64)}
        if len(decode):
            rows_each = q_lens[decode]
            starts = np.repeat(layout.cu_seqlens_q[:-1][decode], rows_each)
            offset = np.arange(len(starts)) - np.repeat(np.cumsum(rows_each) - rows_each, rows_each)  # row in chunk
            lens = (np.repeat((layout.context_lens - q_lens)[decode], rows_each) + offset + 1).astype(np.int64)
            width = int(-(-lens.max() // self.block_size))
            arrays["decode_rows"] = (starts + offset).astype(np.int64)
            arrays["decode_block_tables"] = np.ascontiguousarray(
                np.repeat(layout.block_tables[decode, :width], rows_each, axis=0), dtype=np.int64)
            arrays["decode_lens"] = lens
        return arrays

    def metadata(self, tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
        meta = _common(tensors, layout)
        if "decode_rows" in tensors:
            meta.decode_rows = tensors["decode_rows"]
            meta.decode_block_tables = tensors["decode_block_tables"]
            meta.decode_lens = tensors["decode_lens"]
            meta.decode_mask = self._decode_mask(meta)
        decoded = self._row_decoded(layout)
        meta.all_decode = bool(decoded.all())  # every row on the decode path, in row order
        cu, context = layout.cu_seqlens_q.tolist(), layout.context_lens.tolist()
        for i, kv_len in enumerate(context):
            length = cu[i + 1] - cu[i]
            if decoded[i]:
                continue
            images = None
            if layout.image_spans is not None and layout.image_spans[1, cu[i] : cu[i + 1]].any():
                spans = torch.from_numpy(layout.image_spans[:, cu[i] : cu[i + 1]].astype(np.int64))
                images = (spans[0], spans[1])
            mask = None
            if kv_len > length or images is not None:  # not plain causal from 0: a mask aligned to the end
                mask = _prefill_mask(length, kv_len, None, images)
            block_table = tensors["block_tables"][i, : -(-kv_len // self.block_size)]
            meta.prefills.append(PrefillSpan(cu[i], length, kv_len, block_table, mask, images))
        return meta

    def graph_metadata(self, static, batch: int, max_context: int, workspace) -> AttentionMetadata:
        meta = super().graph_metadata(static, batch, max_context, workspace)
        meta.decode_rows = static["cu_seqlens_q"][:batch]
        meta.decode_block_tables = static["block_tables"].long()
        meta.decode_lens = static["context_lens"].long()
        meta.decode_mask = self._decode_mask(meta)
        return meta

    def _decode_mask(self, meta: AttentionMetadata) -> torch.Tensor | None:
        span = meta.decode_block_tables.shape[1] * self.block_size
        return (torch.arange(span).unsqueeze(0) < meta.decode_lens.unsqueeze(1))[:, None, None, :]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, window: int | None) -> torch.Tensor:
        tokens, heads, head_dim = q.shape
        group = heads // k_cache.shape[2]
        decode_mask, prefill_masks = _masks(meta, window)
        out = torch.empty_like(q)
        if meta.decode_rows is not None:
            attended = self._decode(q if meta.all_decode else q[meta.decode_rows], k_cache, v_cache, meta,
                                    decode_mask, window)
            if meta.all_decode:
                return attended.view(tokens, heads, head_dim)
            out[meta.decode_rows] = attended.view(-1, heads, head_dim)
        for span, mask in zip(meta.prefills, prefill_masks):
            rows = slice(span.token_start, span.token_start + span.length)
            continued = span.mask is not None and window is None and span.images is None
            if continued and self._bf16_prefill_kernel(q, k_cache):
                from kernels.prefill_attention_bf16 import paged_prefill_bf16

                out[rows] = paged_prefill_bf16(q[rows].transpose(0, 1), k_cache, v_cache, span.block_table,
                                               span.kv_len).transpose(0, 1)
                continue
            if span.mask is None:  # the chunk is the whole context: its fresh K/V are all there is
                keys, values = k[rows].transpose(0, 1), v[rows].transpose(0, 1)  # (kv_heads, kv_len, D)
            else:
                keys = k_cache.index_select(0, span.block_table).flatten(0, 1)[: span.kv_len].transpose(0, 1)
                values = v_cache.index_select(0, span.block_table).flatten(0, 1)[: span.kv_len].transpose(0, 1)
            queries = q[rows].transpose(0, 1)  # (heads, length, D)
            if continued and _FLASH is not None:
                out[rows] = _continued_prefill(queries, keys, values).transpose(0, 1)
                continue
            attended = F.scaled_dot_product_attention(
                queries.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0),
                attn_mask=mask, is_causal=mask is None, enable_gqa=group > 1,
            )  # (1, heads, length, D)
            out[rows] = attended[0].transpose(0, 1)
        return out

    def _decode(self, queries: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                mask: torch.Tensor, window: int | None) -> torch.Tensor:
        """queries (decodes, heads, D) over their gathered, padded caches."""
        batch, max_blocks = meta.decode_block_tables.shape
        kv_heads, head_dim = k_cache.shape[2:]
        span = max_blocks * k_cache.shape[1]
        flat_tables = meta.decode_block_tables.flatten()
        keys = k_cache.index_select(0, flat_tables).view(batch, span, kv_heads, head_dim).transpose(1, 2)
        values = v_cache.index_select(0, flat_tables).view(batch, span, kv_heads, head_dim).transpose(1, 2)
        grouped = queries.reshape(batch, kv_heads, -1, head_dim)  # query heads grouped per KV head
        return F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask)


class NumbaBackend(SdpaBackend):
    """As `sdpa`, with decode tokens through the numba kernel (float32 or bfloat16 caches, float32 sums), and bf16
    chunks over cached tokens through the `vdpbf16ps` prefill kernel where the CPU has it.

    A chunk of up to 16 tokens (a decoding reply's last token and its draft tokens) goes to the same kernel over
    the blocks in place: as a prefill span it would gather a copy of its whole cached context per layer and run
    two SDPA calls, for a handful of query rows. Its rows are stacked in one kernel entry (`decode_stacks`), each
    row seeing the keys up to its own position, so the chunk reads its context once rather than once per row
    (sliding-window layers take the rows one by one).
    """

    name = "numba"
    decode_rows_up_to = 16

    def metadata(self, tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
        meta = super().metadata(tensors, layout)
        counts = np.diff(layout.cu_seqlens_q)[self._row_decoded(layout)]
        if len(counts) and counts.max() > 1:
            firsts = np.cumsum(counts) - counts  # each chunk's first row in decode order
            for stack in np.unique(counts):
                chunks = np.flatnonzero(counts == stack)
                rows = (firsts[chunks, None] + np.arange(stack)).reshape(-1)
                last = torch.from_numpy(firsts[chunks] + stack - 1)
                meta.decode_stacks.append((int(stack), torch.from_numpy(rows), meta.decode_block_tables[last],
                                           meta.decode_lens[last]))
        return meta

    def _decode_mask(self, meta: AttentionMetadata) -> None:
        return None  # the kernel stops at each sequence's length

    def _bf16_prefill_kernel(self, q: torch.Tensor, k_cache: torch.Tensor) -> bool:
        """bf16 with a head dim a multiple of 64, on a CPU with AVX512-BF16 and no AMX: 1.2-2.3x torch's flash kernel
        at 16-512 rows over 1,500-16K keys on an AMD EPYC Zen 5 (benchmarks/bench_attention.py)."""
        if not (q.dtype == k_cache.dtype == torch.bfloat16 and q.shape[-1] % 64 == 0):
            return False
        from kernels.prefill_attention_bf16 import available

        return available()

    def _decode(self, queries: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                mask: torch.Tensor | None, window: int | None) -> torch.Tensor:
        from kernels.paged_attention_numba import paged_decode_torch

        batch = meta.decode_lens.shape[0]
        kv_heads, head_dim = k_cache.shape[2:]
        grouped = queries.reshape(batch, kv_heads, -1, head_dim)  # grouped per KV head
        if not meta.decode_stacks or window is not None:
            return paged_decode_torch(grouped.contiguous(), k_cache, v_cache, meta.decode_block_tables,
                                      meta.decode_lens, window)
        out = torch.empty_like(grouped)
        group = grouped.shape[2]
        for stack, rows, tables, lens in meta.decode_stacks:
            n = lens.shape[0]
            stacked = grouped[rows].view(n, stack, kv_heads, group, head_dim).transpose(1, 2)
            attended = paged_decode_torch(stacked.reshape(n, kv_heads, stack * group, head_dim), k_cache, v_cache,
                                          tables, lens, rows=stack)
            out[rows] = attended.view(n, kv_heads, stack, group, head_dim).transpose(1, 2).reshape(-1, kv_heads,
                                                                                                   group, head_dim)
        return out


class InvariantNumbaBackend(NumbaBackend):
    """Every query row through the batch-invariant kernel over keys 0..its position (kernels/invariant_attention_numba.py).

    A prefill chunk's rows go in tiles of `QUERY_TILE` rows that share each widened key tile; a decode row is a
    tile of one. Which rows share a tile changes no row's arithmetic.
    """

    name = "numba"

    def arrays(self, layout: StepLayout) -> dict[str, np.ndarray]:
        from kernels.invariant_attention_numba import query_tiles

        q_lens = np.diff(layout.cu_seqlens_q)
        seq_of_row = np.repeat(np.arange(layout.num_seqs), q_lens)  # (tokens,)
        offset = np.arange(layout.num_tokens) - layout.cu_seqlens_q[:-1][seq_of_row]  # row within its chunk
        lens = (layout.context_lens - q_lens)[seq_of_row] + offset + 1  # keys each row sees (causal)
        width = int(-(-layout.max_context_len // self.block_size))
        return {"decode_rows": np.arange(layout.num_tokens, dtype=np.int64),
                "decode_block_tables": np.ascontiguousarray(layout.block_tables[:, :width], dtype=np.int64),
                "decode_lens": lens.astype(np.int64),
                "row_seq": seq_of_row.astype(np.int64),
                "row_tiles": query_tiles(seq_of_row)}

    def metadata(self, tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
        meta = _common(tensors, layout)
        meta.decode_rows = tensors["decode_rows"]
        meta.decode_block_tables = tensors["decode_block_tables"]  # one row per sequence
        meta.decode_lens = tensors["decode_lens"]
        meta.row_seq = tensors["row_seq"]
        meta.row_tiles = tensors["row_tiles"]
        meta.all_decode = True  # every row is attended as a decode row, in row order
        return meta

    def graph_metadata(self, static, batch: int, max_context: int, workspace) -> AttentionMetadata:
        raise AssertionError("the batch-invariant backend runs on the CPU, without CUDA graphs")

    def _decode(self, queries: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                mask: torch.Tensor | None, window: int | None) -> torch.Tensor:
        from kernels.invariant_attention_numba import rows_attention_torch

        rows = queries.shape[0]
        kv_heads, head_dim = k_cache.shape[2:]
        grouped = queries.reshape(rows, kv_heads, -1, head_dim)
        return rows_attention_torch(grouped, k_cache, v_cache, meta.decode_block_tables, meta.row_seq,
                                    meta.decode_lens, meta.row_tiles, window, meta.image_spans)


_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)  # (output, logsumexp)


def _continued_prefill(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A chunk's attention over its cached context and itself, without the (length, kv_len) mask.

    The cached keys are visible to every query of the chunk, so that part needs no mask and its
    queries can be grouped per KV head (no K/V copies); the chunk's own keys are causal. The two
    softmaxes are merged by their log-sum-exps. With an explicit mask torch's CPU flash kernel
    reads a float copy of the mask for every head: on 2 AMX cores in bf16 this is 1.1-1.3x faster
    at a 4K context and 1.3-1.8x at 16K (benchmarks/bench_attention.py).

    queries (heads, length, D); keys and values (kv_heads, kv_len, D). Returns (heads, length, D).
    """
    heads, length, dim = queries.shape
    kv_heads, kv_len, _ = keys.shape
    group, cached = heads // kv_heads, kv_len - length
    grouped = queries.reshape(1, kv_heads, group * length, dim)  # rows independent: no mask over the prefix
    old, old_lse = _FLASH(grouped, keys[None, :, :cached], values[None, :, :cached])
    old, old_lse = old[0].reshape(heads, length, dim), old_lse[0].reshape(heads, length)
    own_keys, own_values = keys[:, cached:], values[:, cached:]
    if group > 1:
        own_keys, own_values = own_keys.repeat_interleave(group, 0), own_values.repeat_interleave(group, 0)
    new, new_lse = _FLASH(queries[None], own_keys[None], own_values[None], is_causal=True)
    new, new_lse = new[0], new_lse[0]
    top = torch.maximum(old_lse, new_lse)
    w_old, w_new = torch.exp(old_lse - top), torch.exp(new_lse - top)
    merged = (old.float() * w_old[..., None] + new.float() * w_new[..., None]) / (w_old + w_new)[..., None]
    return merged.to(queries.dtype)


def _masks(meta: AttentionMetadata, window: int | None) -> tuple[torch.Tensor | None, list[torch.Tensor | None]]:
    """(decode mask, per-prefill masks) with keys `window` or more positions before their query hidden."""
    if window is None:
        return meta.decode_mask, [span.mask for span in meta.prefills]
    if window not in meta.window_masks:
        decode_mask = meta.decode_mask
        if decode_mask is not None:
            keys = torch.arange(decode_mask.shape[-1])
            decode_mask = decode_mask & (keys >= (meta.decode_lens - window).unsqueeze(1))[:, None, None, :]
        prefill_masks = [span.mask if span.kv_len <= window else
                         _prefill_mask(span.length, span.kv_len, window, span.images) for span in meta.prefills]
        meta.window_masks[window] = (decode_mask, prefill_masks)
    return meta.window_masks[window]


def _prefill_mask(length: int, kv_len: int, window: int | None,
                  images: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """(length, kv_len) bool: the chunk's queries at the end of the context see the keys up to themselves (the last
    `window` of them), and image rows every key of their image [start, end) (within the window)."""
    queries = torch.arange(kv_len - length, kv_len).unsqueeze(1)
    keys = torch.arange(kv_len).unsqueeze(0)
    mask = keys <= queries
    if images is not None:
        mask |= (keys >= images[0].unsqueeze(1)) & (keys < images[1].unsqueeze(1))
    if window is not None:
        mask &= keys > queries - window
    return mask
