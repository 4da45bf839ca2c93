"""How many KV blocks the pool gets: an explicit size, the CPU default, or what the GPU has free.

On a GPU the pool is sized as vLLM and nano-vllm size it: after the weights are loaded and one
warm-up forward at the largest prefill chunk has run, `gpu_memory_utilization` of the card,
minus everything already in use (this process and others), minus the warm-up's activation peak,
minus what the decode CUDA graphs and the encoder cache will take, becomes KV blocks. On a CPU
(no free-memory reading that means anything on a shared machine) the pool is `CPU_KV_CACHE_GIB`.
`EngineConfig.kv_cache_gib` or `num_kv_blocks` override both.

A hybrid model (linear-attention layers with a fixed-size state per sequence, `ModelShape.state_bytes`)
takes its states and their prefix checkpoints from the same budget (`split_for_states`): a quarter of
it, at most one state per `max_num_seqs`, becomes state slots, an eighth (at most 512 MiB) checkpoints,
the rest KV blocks; a budget that cannot hold one state and two blocks is refused at start with the
numbers. The scheduler keeps the live states within the slots by preempting idle sessions.

A model with sliding-window layers (Gemma-3's local layers) keeps their KV in a pool of its own that holds
only each sequence's window (engine/core/window_blocks.py): `split_for_window` gives it what the sequences
can use, at most an even share, and the main pool the rest, so long conversations fit in more tokens.

The longest conversation the engine takes is the model's context or what the pool holds, the
smaller (`longest_conversation`); with `EngineConfig.max_model_len` set, a pool that cannot hold
one request of that length is refused at start, naming the numbers and the flag to change.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.config import EngineConfig
from models.base import ModelShape
from tools.errors import DossierError

__all__ = ["CPU_KV_CACHE_GIB", "bytes_per_block", "blocks_from_free_memory", "explicit_blocks", "longest_conversation",
           "pool_line", "split_for_states", "split_for_window", "state_budget", "StateBudget", "window_blocks",
           "window_blocks_needed", "window_bytes_per_block"]

CPU_KV_CACHE_GIB = 2.0  # the pool on a CPU when no size is given (every command: run, serve, chat, train, eval)


def bytes_per_block(shape: ModelShape, config: EngineConfig, dtype: torch.dtype) -> int:
    """Bytes one KV block takes over the layers of the main pool (keys and values): every KV layer but the
    sliding-window ones, which have a pool of their own (`window_bytes_per_block`)."""
    return _block_bytes(len(shape.full_layers), (shape.num_kv_heads, shape.head_dim), config, dtype)


def window_bytes_per_block(shape: ModelShape, config: EngineConfig, dtype: torch.dtype) -> int:
    """Bytes one block of the sliding-window layers' pool takes (0: the model has none)."""
    return _block_bytes(len(shape.window_layers), shape.window_kv_shape, config, dtype)


def _block_bytes(layers: int, kv_shape: tuple[int, int], config: EngineConfig, dtype: torch.dtype) -> int:
    """Keys and values of one block over `layers` layers of (KV heads, head size) `kv_shape`."""
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * layers * config.block_size * kv_shape[0] * kv_shape[1] * element


def _budget(shape: ModelShape, config: EngineConfig, dtype: torch.dtype, device: str) -> int | None:
    """Bytes for KV blocks of an explicitly sized pool (after a hybrid model's states); None: sized otherwise."""
    gib = config.kv_cache_gib
    if gib is None:
        if device == "cuda":
            return None
        gib = CPU_KV_CACHE_GIB
    budget = int(gib * 2**30)
    if shape.state_bytes:
        per_block = bytes_per_block(shape, config, dtype) + window_bytes_per_block(shape, config, dtype)
        budget = split_for_states(shape, config, budget, per_block).kv_bytes
    return budget


def explicit_blocks(shape: ModelShape, config: EngineConfig, dtype: torch.dtype, device: str) -> int | None:
    """Blocks of an explicitly sized pool (`num_kv_blocks`, `kv_cache_gib`, or the CPU default); None on a GPU
    with no size given: the runner sizes it from free memory after its warm-up."""
    if config.num_kv_blocks is not None:
        return config.num_kv_blocks
    budget = _budget(shape, config, dtype, device)
    return None if budget is None else split_for_window(shape, config, dtype, budget)[0]


def window_blocks(shape: ModelShape, config: EngineConfig, dtype: torch.dtype, device: str, num_blocks: int) -> int:
    """Blocks of the sliding-window layers' pool beside a main pool of `num_blocks` (0: no such layers).

    From a byte budget it is `split_for_window`'s share; beside a pool given in blocks (`num_kv_blocks`, tests),
    what the sequences need (`window_blocks_needed`) but at most `num_blocks`, and at least one sequence's.
    """
    if not shape.window_layers:
        return 0
    budget = None if config.num_kv_blocks is not None else _budget(shape, config, dtype, device)
    if budget is not None:
        return split_for_window(shape, config, dtype, budget)[1]
    return max(_window_minimum(shape, config), min(window_blocks_needed(shape, config), num_blocks))


def window_blocks_needed(shape: ModelShape, config: EngineConfig) -> int:
    """Blocks the sliding-window layers use at most: every sequence's window (and the block its next token
    starts, and a partial one), plus the blocks of one step's prefill chunks."""
    return (config.max_num_seqs * _window_minimum(shape, config)
            + -(-config.max_num_batched_tokens // config.block_size))


def _window_minimum(shape: ModelShape, config: EngineConfig) -> int:
    return -(-shape.window // config.block_size) + 2


def split_for_window(shape: ModelShape, config: EngineConfig, dtype: torch.dtype, budget: int) -> tuple[int, int]:
    """(main pool blocks, sliding-window pool blocks) from `budget` bytes.

    The sliding-window layers get the blocks their sequences can use (`window_blocks_needed`), but never more
    than an even split would give them (so the main pool is never smaller than with one pool for all layers);
    the main pool gets the rest. Without sliding-window layers: (budget // block bytes, 0).

    Raises:
        DossierError: the budget cannot hold two main blocks and one sequence's window (the numbers).
    """
    per_block, per_window = bytes_per_block(shape, config, dtype), window_bytes_per_block(shape, config, dtype)
    if not per_window:
        return max(2, budget // per_block), 0
    window = min(window_blocks_needed(shape, config), budget // (per_block + per_window))
    full = (budget - window * per_window) // per_block
    if window < _window_minimum(shape, config) or full < 2:
        mib = 2**20
        raise DossierError(
            f"a KV budget of {budget / mib:.1f} MiB is too small for this model: its sliding-window layers need "
            f"{_window_minimum(shape, config)} blocks of {per_window / mib:.3f} MiB for one sequence's "
            f"{shape.window}-token window, and the other layers two blocks of {per_block / mib:.3f} MiB; raise "
            "--kv-cache-gib (or --gpu-memory-utilization on a GPU)")
    return full, window


STATE_SHARE = 0.25  # of a hybrid model's budget, at most, for its sequences' states
CHECKPOINT_SHARE = 0.125  # and for prefix checkpoints (at most MAX_CHECKPOINT_BYTES)
MAX_CHECKPOINT_BYTES = 512 * 2**20


@dataclass(frozen=True, slots=True)
class StateBudget:
    """A hybrid model's budget split: state slots, checkpoint bytes, and what is left for KV blocks."""

    slots: int
    checkpoint_bytes: int
    kv_bytes: int


def split_for_states(shape: ModelShape, config: EngineConfig, budget: int, per_block: int) -> StateBudget:
    """How a hybrid model's `budget` bytes are shared: states (one per slot), checkpoints, KV blocks.

    Raises:
        DossierError: the budget cannot hold one sequence's state and two KV blocks (the numbers, what to raise).
    """
    state = shape.state_bytes
    slots = min(config.max_num_seqs, int(budget * STATE_SHARE) // state)
    checkpoint_bytes = min(MAX_CHECKPOINT_BYTES, int(budget * CHECKPOINT_SHARE))
    kv_bytes = budget - slots * state - checkpoint_bytes
    if slots < 1 or kv_bytes < 2 * per_block:
        mib = 2**20
        raise DossierError(
            f"a KV budget of {budget / mib:.1f} MiB is too small for this model: each sequence's linear-attention "
            f"state takes {state / mib:.2f} MiB (a quarter of the budget is for states, so at least "
            f"{4 * state / mib:.1f} MiB), and one KV block {per_block / mib:.3f} MiB; raise --kv-cache-gib "
            "(or --gpu-memory-utilization on a GPU)")
    return StateBudget(slots, checkpoint_bytes, kv_bytes)


def blocks_from_free_memory(total: int, free: int, activation_peak: int, reserved: int, per_block: int,
                            utilization: float) -> int:
    """KV blocks that fit in `utilization` of a card of `total` bytes with `free` bytes free now.

    Args:
        total, free: `torch.cuda.mem_get_info()`'s answer (bytes), after the weights and the warm-up.
        activation_peak: how far the warm-up forward rose above what stays allocated (bytes): steps need it again.
        reserved: what is allocated later and must stay free: the CUDA-graph pool, the encoder cache (bytes).
        per_block: `bytes_per_block`.
        utilization: the share of the card Dossier may use (`--gpu-memory-utilization`).

    Raises:
        DossierError: nothing is left for the KV cache (the numbers and the flags to change).
    """
    in_use = total - free
    budget = int(total * utilization) - in_use - activation_peak - reserved
    blocks = budget // per_block
    if blocks < 2:
        gib = 2**30
        raise DossierError(
            f"no GPU memory left for the KV cache: {utilization:.0%} of the card's {total / gib:.1f} GiB is "
            f"{total * utilization / gib:.1f} GiB, of which {in_use / gib:.1f} GiB is in use (weights and other "
            f"processes), {activation_peak / gib:.2f} GiB is the forward's activations and {reserved / gib:.2f} GiB "
            "is kept for CUDA graphs and encoded images; raise --gpu-memory-utilization, lower --max-batched-tokens, "
            "quantise the model (--quantization) or free the card")
    return blocks


def longest_conversation(max_positions: int, pool_tokens: int, config: EngineConfig) -> int:
    """Tokens the longest conversation may reach: the model's context or the pool, the smaller; `max_model_len`
    when set (refused here when the pool cannot hold one request of it)."""
    if config.max_model_len is None:
        return min(max_positions, pool_tokens)
    if config.max_model_len > max_positions:
        raise DossierError(f"max_model_len {config.max_model_len} exceeds the model's {max_positions}-token context")
    if config.max_model_len > pool_tokens:
        raise DossierError(f"the KV pool holds {pool_tokens} tokens, less than one request of max_model_len "
                           f"{config.max_model_len}; raise --kv-cache-gib (or --gpu-memory-utilization on a GPU) or "
                           "lower --max-model-len")
    return config.max_model_len


def pool_line(num_blocks: int, block_size: int, per_block: int, longest: int, sized_from: str,
              window_blocks: int = 0, window_per_block: int = 0, window: int | None = None) -> str:
    """The load line: the pool in tokens and GiB, where its size came from, the sliding-window layers' pool if
    any, and the longest conversation."""
    windows = ""
    if window_blocks:
        windows = (f" + sliding-window layers' pool {window_blocks * block_size:,} tokens "
                   f"({window_blocks * window_per_block / 2**30:.2f} GiB, each sequence's last {window:,})")
    return (f"KV pool {num_blocks * block_size:,} tokens ({num_blocks * per_block / 2**30:.2f} GiB, {sized_from})"
            f"{windows}; longest conversation {longest:,} tokens")


def state_budget(shape: ModelShape, config: EngineConfig, dtype: torch.dtype, device: str) -> StateBudget | None:
    """A hybrid model's state slots and checkpoint bytes, as `explicit_blocks` split its budget; None: no states.

    With `num_kv_blocks` given, or on a GPU sized from free memory, the states take `max_num_seqs` slots and
    checkpoints up to MAX_CHECKPOINT_BYTES (on a GPU the runner keeps that much free before sizing the pool).
    """
    if not shape.state_bytes:
        return None
    gib = config.kv_cache_gib if config.kv_cache_gib is not None else (None if device == "cuda" else CPU_KV_CACHE_GIB)
    if config.num_kv_blocks is not None or gib is None:
        return StateBudget(config.max_num_seqs, MAX_CHECKPOINT_BYTES, 0)
    per_block = bytes_per_block(shape, config, dtype) + window_bytes_per_block(shape, config, dtype)
    return split_for_states(shape, config, int(gib * 2**30), per_block)
