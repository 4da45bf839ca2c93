"""What one step builds: compact layouts, one packed copy, and no length x context tensor on GPU paths."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine.core.attention import make_backend
from engine.core.block_manager import BlockManager
from engine.core.config import EngineConfig
from engine.core.model_runner import ModelRunner
from engine.core.scheduler import Chunk
from engine.core.sequence import Sequence
from engine.core.step_layout import build_layout, pack_to_device


@pytest.fixture(scope="module")
def tiny_adapter():
    from models.loading import load_adapter

    return load_adapter("llama-tiny")  # 4 layers, 8 heads over 2 KV heads, random weights


def sequences_with_chunks(block_size: int, plan: list[tuple[int, int]], num_blocks: int = 1024):
    """Chunks of sequences holding `cached` computed tokens then `new` uncomputed ones, blocks scattered."""
    manager = BlockManager(num_blocks, block_size, enable_prefix_caching=False)
    manager.allocate(Sequence(99, block_size), 7 * block_size)  # later sequences start mid-pool
    chunks = []
    for seq_id, (cached, new) in enumerate(plan):
        seq = Sequence(seq_id, block_size)
        seq.append(list(range(5, 5 + cached + new)), list(range(cached + new)), cached + new)
        manager.allocate(seq, cached + new)
        seq.num_computed_tokens = cached
        chunks.append(Chunk(SimpleNamespace(seq=seq), cached, new, True))
    return chunks


def test_layout_matches_the_per_token_definition():
    chunks = sequences_with_chunks(4, [(0, 9), (13, 1), (6, 7)])
    layout = build_layout(chunks, 4)
    expected_slots, expected_positions = [], []
    for chunk in chunks:
        table = chunk.request.seq.block_table
        for i in range(chunk.start, chunk.start + chunk.length):
            expected_slots.append(table[i // 4] * 4 + i % 4)
            expected_positions.append(i)
    assert layout.slot_mapping.tolist() == expected_slots
    assert layout.positions.tolist() == expected_positions
    assert layout.cu_seqlens_q.tolist() == [0, 9, 10, 17]
    assert layout.context_lens.tolist() == [9, 14, 13]
    assert layout.sample_rows.tolist() == [8, 9, 16]
    assert (layout.max_q_len, layout.max_context_len, layout.all_decode) == (9, 14, False)
    for row, chunk in enumerate(chunks):
        table = chunk.request.seq.block_table
        assert layout.block_tables[row, : len(table)].tolist() == table


def test_pack_to_device_is_one_buffer_with_exact_values():
    arrays = {"a": np.arange(5, dtype=np.int64), "b": np.array([[1, 2, 3], [4, 5, 6]], np.int32),
              "c": np.zeros(0, np.int64), "d": np.array([7, -1], np.int64)}
    tensors = pack_to_device(arrays, torch.device("cpu"))
    for name, array in arrays.items():
        assert tensors[name].dtype == {np.int64: torch.int64, np.int32: torch.int32}[array.dtype.type]
        assert tensors[name].tolist() == array.tolist()
    storages = {t.untyped_storage().data_ptr() for t in tensors.values()}
    assert len(storages) == 1, "every array must travel in the one buffer (one host->device copy)"


def all_tensors(*objects) -> list[tuple[str, torch.Tensor]]:
    """Every tensor reachable from the step's inputs and metadata (dataclass fields, lists, dicts)."""
    found = []

    def walk(name, value):
        if isinstance(value, torch.Tensor):
            found.append((name, value))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(f"{name}.{f.name}", getattr(value, f.name))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{name}[{key!r}]", item)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(f"{name}[{i}]", item)

    for i, obj in enumerate(objects):
        walk(f"#{i}", obj)
    return found


@pytest.mark.parametrize("backend", ["triton", "flash_attn", "sdpa"])
def test_gpu_metadata_builds_nothing_of_size_length_by_context(tiny_adapter, backend):
    """A 512-token chunk after 4,000 cached tokens (plus a decode row): what `prepare` returns, inspected.

    The GPU backends (triton, flash_attn) must hold only O(tokens + seqs x blocks) integers; the CPU
    reference (sdpa) builds the end-aligned causal mask, which shows the inspection sees such a tensor.
    """
    block_size, length, cached = 16, 512, 4000
    config = EngineConfig(device="cpu", block_size=block_size, num_kv_blocks=600, attention_backend="sdpa")
    attention = make_backend(backend, tiny_adapter.shape, block_size, torch.device("cpu"), torch.float32)
    runner = ModelRunner(tiny_adapter, config, 600, backend=attention)
    chunks = sequences_with_chunks(block_size, [(cached, length), (300, 1)], num_blocks=600)
    tensors, meta, batch = runner.prepare(build_layout(chunks, block_size))
    context = cached + length
    found = all_tensors(tensors, meta, batch)
    largest_name, largest = max(found, key=lambda item: item[1].numel())
    if backend == "sdpa":
        assert largest.numel() == length * context, "the CPU path's mask should be visible to this inspection"
        return
    tokens, seqs, blocks = length + 1, 2, -(-context // block_size)
    bound = tokens + seqs * blocks  # O(tokens + seqs x blocks): 1,077 here, against 2,310,144 = length x context
    assert largest.numel() <= bound, f"{backend}: {largest_name} has {tuple(largest.shape)}"
    total = sum(t.numel() for _, t in found)
    assert total <= 8 * bound, f"{backend}: {total} elements of metadata for a {length}-token chunk"
    assert meta.block_tables.dtype == torch.int32 and meta.context_lens.tolist() == [context, 301]
