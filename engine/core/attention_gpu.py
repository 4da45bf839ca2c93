"""The GPU attention backends: our Triton kernels, and flash-attn when installed.

Both read the paged cache in place through int32 block tables and need only compact per-sequence
metadata (first query row, context length, block table): no mask, no padded copy of the cache,
nothing of size length x context. A decode step (every chunk one token) takes the decode kernel;
any other step takes the varlen kernel for all its sequences (decode rows are chunks of one query).

The Triton backend also runs on the CPU under `TRITON_INTERPRET=1`, which is how the CPU test
suite runs the engine through these kernels (tests/engine/test_triton_engine.py).
"""

from __future__ import annotations

import numpy as np
import torch

from engine.core.attention import AttentionBackend, AttentionMetadata, _common
from engine.core.step_layout import StepLayout

__all__ = ["FlashAttnBackend", "InvariantTritonBackend", "TritonBackend"]


class _PagedGpuBackend(AttentionBackend):
    graphs = True

    def arrays(self, layout: StepLayout) -> dict[str, np.ndarray]:
        return {"cu_seqlens_q": layout.cu_seqlens_q, "context_lens": layout.context_lens,
                "block_tables": layout.block_tables}

    def metadata(self, tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
        meta = _common(tensors, layout)
        meta.cu_seqlens_q = tensors["cu_seqlens_q"]
        meta.context_lens = tensors["context_lens"]
        meta.block_tables = tensors["block_tables"]
        return meta


class TritonBackend(_PagedGpuBackend):
    """`kernels/paged_attention_triton.py`: varlen prefill and split-K decode."""

    name = "triton"

    def __init__(self, shape, block_size, device, dtype) -> None:
        super().__init__(shape, block_size, device, dtype)
        from kernels import paged_attention_triton as kernels

        self.kernels = kernels
        self.workspace = kernels.DecodeWorkspace()  # split-K partials of eager decode steps, grown on demand

    def metadata(self, tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
        meta = super().metadata(tensors, layout)
        if meta.all_decode:
            self.plan_decode(meta, meta.max_context_len)
            meta.workspace = self.workspace
        return meta

    def graph_metadata(self, static, batch: int, max_context: int, workspace) -> AttentionMetadata:
        meta = super().graph_metadata(static, batch, max_context, workspace)
        self.plan_decode(meta, max_context)  # the graph's context bucket; splits past a sequence's context exit at once
        meta.workspace = workspace
        return meta

    def graph_workspace(self, buckets: list[int], contexts: list[int]):
        from engine.core.attention import AttentionMetadata

        splits = 0
        for batch in buckets:
            for context in contexts:
                plan = AttentionMetadata(slot_mapping=None, num_seqs=batch, max_q_len=1, max_context_len=context,
                                         all_decode=True)
                self.plan_decode(plan, context)
                splits = max(splits, plan.max_splits)
        return self.kernels.DecodeWorkspace(max(buckets), splits)

    def plan_decode(self, meta: AttentionMetadata, max_context: int) -> None:
        """Split-K shape for decoding `meta.num_seqs` sequences of at most `max_context` keys."""
        meta.split_len = self.kernels.decode_split_len(max_context, meta.num_seqs, self.shape.num_kv_heads,
                                                       block_n=self.kernels.DECODE_BLOCK_N)
        meta.max_splits = -(-max_context // meta.split_len)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, window: int | None) -> torch.Tensor:
        kernels = self.kernels
        if meta.all_decode:
            return kernels.paged_decode(q, k_cache, v_cache, meta.context_lens, meta.block_tables,
                                        split_len=meta.split_len, max_splits=meta.max_splits,
                                        workspace=meta.workspace, window=window or 0, block_n=kernels.DECODE_BLOCK_N)
        return kernels.paged_prefill(q, k_cache, v_cache, meta.cu_seqlens_q, meta.context_lens, meta.block_tables,
                                     meta.max_q_len, window=window or 0, block_m=kernels.PREFILL_BLOCK_M,
                                     block_n=kernels.PREFILL_BLOCK_N, image_spans=meta.image_spans)


class InvariantTritonBackend(TritonBackend):
    """The batch-invariant mode's attention on a GPU: every row through the varlen kernel, decode rows too.

    The varlen kernel (`paged_prefill`) folds a row's keys in tiles of PREFILL_BLOCK_N anchored at key 0, in
    order, with fixed tile shapes: the tiles a row's chunking adds before its window or after its position are
    fully masked for that row, and folding a fully masked tile leaves the online softmax's maximum, total and
    sum unchanged bit for bit (scale 1, terms 0). So a row's output does not depend on its chunk, its tile or
    the step's other rows. The split-K decode kernel sums in splits sized by the batch: not used here, and
    neither are CUDA graphs (they replay that kernel). tests/engine/test_triton_engine.py checks it under
    TRITON_INTERPRET=1 on the CPU; on a GPU `tl.dot`'s per-element order is the hardware's, the same for every
    row of a fixed tile shape.
    """

    graphs = False

    def metadata(self, tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
        return _PagedGpuBackend.metadata(self, tensors, layout)  # no decode plan: decode rows are chunks of one

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, window: int | None) -> torch.Tensor:
        kernels = self.kernels
        return kernels.paged_prefill(q, k_cache, v_cache, meta.cu_seqlens_q, meta.context_lens, meta.block_tables,
                                     meta.max_q_len, window=window or 0, block_m=kernels.PREFILL_BLOCK_M,
                                     block_n=kernels.PREFILL_BLOCK_N, image_spans=meta.image_spans)


class FlashAttnBackend(_PagedGpuBackend):
    """flash-attn 2 with block tables (`block_size` a multiple of 256)."""

    name = "flash_attn"

    def arrays(self, layout: StepLayout) -> dict[str, np.ndarray]:
        arrays = super().arrays(layout)
        cu_k = np.zeros(layout.num_seqs + 1, dtype=np.int32)
        np.cumsum(layout.context_lens, out=cu_k[1:])
        arrays["cu_seqlens_k"] = cu_k
        return arrays

    def metadata(self, tensors: dict[str, torch.Tensor], layout: StepLayout) -> AttentionMetadata:
        meta = super().metadata(tensors, layout)
        meta.cu_seqlens_k = tensors.get("cu_seqlens_k")
        return meta

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, window: int | None) -> torch.Tensor:
        import flash_attn

        window_size = (-1, -1) if window is None else (window - 1, 0)
        if meta.all_decode:  # (batch, 1, heads, D): the new K/V are already in the cache
            out = flash_attn.flash_attn_with_kvcache(
                q.unsqueeze(1), k_cache, v_cache, cache_seqlens=meta.context_lens, block_table=meta.block_tables,
                causal=True, window_size=window_size,
            )
            return out.squeeze(1)
        return flash_attn.flash_attn_varlen_func(
            q, k_cache, v_cache, cu_seqlens_q=meta.cu_seqlens_q, cu_seqlens_k=meta.cu_seqlens_k,
            max_seqlen_q=meta.max_q_len, max_seqlen_k=meta.max_context_len, causal=True,
            window_size=window_size, block_table=meta.block_tables,
        )
