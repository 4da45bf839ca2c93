"""Runs one step: packs the scheduled chunks into a flat batch, calls the adapter, returns logits.

Owns the paged KV cache tensors and, for vision-language models, the encoder cache:
the images of the step's chunks (of every session in it) are encoded before the
forward, in one batched call. Logits are computed only for the rows that sample (the
last token of every chunk that reaches its sequence's end), never for the whole prefill.
"""

import torch

from engine.core.attention import AttentionMetadata, PagedAttention, PrefillSpan, resolve_backend
from engine.core.config import EngineConfig
from engine.core.encoder_cache import EncoderCache
from engine.core.scheduler import Chunk
from models.base import ForwardBatch, ModelAdapter, ModelShape, MultimodalChunk, MultimodalItem

__all__ = ["ModelRunner", "kv_blocks_for_budget"]


def kv_blocks_for_budget(shape: ModelShape, config: EngineConfig, dtype: torch.dtype) -> int:
    """Blocks that fit in `config.kv_cache_gib` (or exactly `config.num_kv_blocks`)."""
    if config.num_kv_blocks is not None:
        return config.num_kv_blocks
    element = torch.empty((), dtype=dtype).element_size()
    per_block = 2 * shape.num_layers * config.block_size * shape.num_kv_heads * shape.head_dim * element
    return max(2, int(config.kv_cache_gib * 2**30 // per_block))


class ModelRunner:
    """The KV cache and the forward of one packed step."""

    def __init__(self, adapter: ModelAdapter, config: EngineConfig, num_blocks: int) -> None:
        self.adapter = adapter
        self.config = config
        shape = adapter.shape
        self.device = next(adapter.parameters()).device
        self.dtype = adapter.dtype
        self.block_size = config.block_size
        self.backend = resolve_backend(config.attention_backend, self.device.type, config.block_size, self.dtype)
        cache_shape = (shape.num_layers, num_blocks, config.block_size, shape.num_kv_heads, shape.head_dim)
        self.k_cache = torch.zeros(cache_shape, dtype=self.dtype, device=self.device)
        self.v_cache = torch.zeros(cache_shape, dtype=self.dtype, device=self.device)
        self.encoder: EncoderCache | None = None
        if getattr(adapter, "vision", None) is not None:
            capacity = int(config.encoder_cache_gib * 2**30)
            self.encoder = EncoderCache(adapter, capacity, config.max_encoder_batch_patches)

    @torch.inference_mode()
    def run(self, chunks: list[Chunk]) -> torch.Tensor:
        """Forward the chunks; return float32 logits (sampling chunks, vocab) in chunk order."""
        batch, meta, sample_rows = self._prepare(chunks)
        if batch.mm_chunks:
            self.encoder.fill(batch.mm_chunks, _pending_items(chunks))
        hidden = self.adapter.forward(batch, PagedAttention(self.k_cache, self.v_cache, meta, self.backend))
        if not sample_rows:
            return torch.empty(0, self.adapter.shape.vocab_size)
        rows = torch.tensor(sample_rows, device=self.device)
        return self.adapter.compute_logits(hidden[rows]).float()

    def _prepare(self, chunks: list[Chunk]) -> tuple[ForwardBatch, AttentionMetadata, list[int]]:
        bs = self.block_size
        input_ids: list[int] = []
        positions: list = []
        slots: list[int] = []
        mm_chunks: list[MultimodalChunk] = []
        sample_rows: list[int] = []
        decode_rows: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        prefills: list[PrefillSpan] = []
        for chunk in chunks:
            seq = chunk.request.seq
            row = len(input_ids)
            start, stop = chunk.start, chunk.start + chunk.length
            input_ids.extend(seq.token_ids[start:stop])
            positions.extend(seq.positions[start:stop])
            table = seq.block_table
            slots.extend(table[i // bs] * bs + i % bs for i in range(start, stop))
            for item_start, item in seq.mm_items:
                lo, hi = max(start, item_start), min(stop, item_start + item.length)
                if lo < hi:
                    mm_chunks.append(MultimodalChunk(row + lo - start, item, lo - item_start, hi - item_start))
            if chunk.samples:
                sample_rows.append(row + chunk.length - 1)
            if chunk.length == 1:
                decode_rows.append(row)
                decode_tables.append(table[: -(-stop // bs)])
                decode_lens.append(stop)
            else:
                mask = None
                if start > 0:  # queries sit at the end of a longer context: causal mask aligned to the end
                    query_pos = torch.arange(start, stop).unsqueeze(1)
                    mask = torch.arange(stop).unsqueeze(0) <= query_pos  # (length, kv_len)
                    mask = mask.to(self.device)
                block_table = torch.tensor(table[: -(-stop // bs)], dtype=torch.long, device=self.device)
                prefills.append(PrefillSpan(row, chunk.length, stop, block_table, mask))
        device = self.device
        position_tensor = torch.tensor(positions, dtype=torch.long)
        if self.adapter.shape.position_dims > 1:
            position_tensor = position_tensor.T.contiguous()  # (dims, tokens)
        meta = AttentionMetadata(slot_mapping=torch.tensor(slots, dtype=torch.long, device=device), prefills=prefills)
        if decode_rows:
            width = max(len(t) for t in decode_tables)
            padded = [t + [0] * (width - len(t)) for t in decode_tables]
            meta.decode_rows = torch.tensor(decode_rows, dtype=torch.long, device=device)
            meta.decode_block_tables = torch.tensor(padded, dtype=torch.long, device=device)
            lens = torch.tensor(decode_lens, dtype=torch.long, device=device)
            meta.decode_lens = lens
            meta.all_decode = len(decode_rows) == len(input_ids)
            meta.decode_mask = (torch.arange(width * bs, device=device).unsqueeze(0) < lens.unsqueeze(1))[:, None, None, :]
        if self.backend == "flash_attn":
            self._flash_metadata(meta, chunks)
        batch = ForwardBatch(
            input_ids=torch.tensor(input_ids, dtype=torch.long, device=device),
            positions=position_tensor.to(device),
            mm_chunks=mm_chunks,
        )
        return batch, meta, sample_rows

    def _flash_metadata(self, meta: AttentionMetadata, chunks: list[Chunk]) -> None:
        q_lens = [c.length for c in chunks]
        k_lens = [c.start + c.length for c in chunks]
        tables = [c.request.seq.block_table[: -(-k // self.block_size)] for c, k in zip(chunks, k_lens)]
        width = max(len(t) for t in tables)
        device = self.device
        meta.cu_seqlens_q = torch.tensor([0, *q_lens], device=device).cumsum(0).to(torch.int32)
        meta.cu_seqlens_k = torch.tensor([0, *k_lens], device=device).cumsum(0).to(torch.int32)
        meta.max_seqlen_q, meta.max_seqlen_k = max(q_lens), max(k_lens)
        meta.block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32, device=device)


def _pending_items(chunks: list[Chunk]) -> list[MultimodalItem]:
    """Images of the step's sequences that lie beyond this step's chunks (still to be prefilled)."""
    pending = []
    for chunk in chunks:
        stop = chunk.start + chunk.length
        pending.extend(item for start, item in chunk.request.seq.mm_items if start >= stop)
    return pending
