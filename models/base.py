"""The interface every model family implements, so the engine never sees a family's details.

An adapter owns three things:
- the forward pass over a flat, packed batch of tokens from many sequences, calling back
  into the engine's paged attention for each layer (`AttentionFn`), and logits for the
  few positions that sample;
- per-segment positions: the engine asks the adapter for the positions of every appended
  segment, offset from the sequence's next position (1-D RoPE for text models; Qwen-VL's
  3-D M-RoPE later). Positions live on the engine's sequence, never on the model object;
- a `ChatProcessor` that renders one chat message at a time into token ids.

Multimodal families put images in a segment as `MultimodalItem`s: the item's content hash
joins the key of every KV block it overlaps. Before a step the engine has the adapter
encode the items of the step (`encode_multimodal`, batched across sessions, through its
encoder cache), and the adapter receives the part of each item that falls in the current
chunk with the item's encoder output (`ForwardBatch.mm_chunks`): chunked prefill may split
an image across steps.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from tools.errors import DossierError

__all__ = [
    "AttentionFn",
    "ChatProcessor",
    "ForwardBatch",
    "ModelAdapter",
    "ModelShape",
    "MultimodalChunk",
    "MultimodalItem",
    "SampledRows",
    "Segment",
]


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the engine needs to size the KV cache and check inputs."""

    num_layers: int  # transformer layers, each with its own K and V cache
    num_kv_heads: int  # key/value heads per layer (GQA)
    head_dim: int  # channels per head
    vocab_size: int  # rows of the logits (may exceed the tokenizer's size)
    max_positions: int  # longest sequence the model was trained for, in tokens
    position_dims: int = 1  # 1 for RoPE, 3 for M-RoPE (temporal, height, width)
    kv_layers: tuple[int, ...] | None = None  # the layers that keep KV; None: all (a hybrid's linear layers do not)
    state_bytes: int = 0  # per sequence, the fixed-size states of a hybrid model's linear layers (float32)
    window: int | None = None  # the sliding window of `window_layers`, tokens
    window_layers: tuple[int, ...] = ()  # layers that attend through `window`: their KV has a pool of its own
    # the window layers' KV heads and head size where they differ from the other layers' (Gemma 4: 256-channel
    # local heads, 512-channel global ones); None: num_kv_heads, head_dim
    window_kv_heads: int | None = None
    window_head_dim: int | None = None
    # an image's tokens attend to each other in both directions (Gemma-3); text stays causal. Every attention
    # backend applies the rule and the scheduler never splits an image between prefill chunks.
    bidirectional_images: bool = False
    # only the sliding-window layers apply that rule; the global layers stay causal over images too (Gemma 4)
    bidirectional_window_only: bool = False
    # layers from this index on feed nothing but the sampled rows' logits (Gemma 4's KV-sharing layers keep no KV):
    # the engine then hands the forward the sampled rows and an attention over them alone (`ForwardBatch.sampled`)
    sampled_only_from: int | None = None

    @property
    def num_kv_layers(self) -> int:
        """Layers with a K and V cache."""
        return self.num_layers if self.kv_layers is None else len(self.kv_layers)

    @property
    def window_kv_shape(self) -> tuple[int, int]:
        """(KV heads, head size) of the sliding-window layers' cache."""
        return self.window_kv_heads or self.num_kv_heads, self.window_head_dim or self.head_dim

    @property
    def full_layers(self) -> tuple[int, ...]:
        """Layers whose KV covers the whole context (every KV layer but the sliding-window ones)."""
        kv = range(self.num_layers) if self.kv_layers is None else self.kv_layers
        return tuple(layer for layer in kv if layer not in self.window_layers)


@dataclass(slots=True)
class MultimodalItem:
    """An image (or other non-text input) merged at placeholder tokens of a segment."""

    offset: int  # index in the segment's token_ids of the first placeholder token
    length: int  # number of placeholder tokens it fills
    content_hash: str  # hash of the content: part of the KV block key wherever it lies
    data: Any = None  # family-specific inputs (pixel values and grid, or embeddings)


@dataclass(slots=True)
class Segment:
    """Token ids appended to a sequence in one go (a rendered message, a generation prompt)."""

    token_ids: list[int]
    positions: list | None = None  # per-token positions; None lets the adapter compute them
    mm_items: list[MultimodalItem] = field(default_factory=list)


@dataclass(slots=True)
class MultimodalChunk:
    """The part of a multimodal item that lies in the current forward batch."""

    batch_offset: int  # index in ForwardBatch.input_ids of the chunk's first placeholder token
    item: MultimodalItem
    start: int  # first placeholder index of the item covered by this chunk
    stop: int  # one past the last placeholder index covered
    encoded: Any = None  # the whole item's encoder output (set by the engine before the forward)


@dataclass(slots=True)
class ForwardBatch:
    """A packed batch: the tokens of many sequences laid end to end."""

    input_ids: torch.Tensor  # (tokens,) int64
    positions: torch.Tensor  # (tokens,) or (position_dims, tokens) int64
    mm_chunks: list[MultimodalChunk] = field(default_factory=list)
    # for a model with `ModelShape.sampled_only_from`, when the step samples some rows but not all: those rows and
    # an attention whose queries are those rows alone (each its sequence's last, over all its keys). The forward
    # then returns the hidden states of those rows only. None: every row goes through every layer.
    sampled: "SampledRows | None" = None


@dataclass(slots=True)
class SampledRows:
    """The rows of a step whose logits are sampled, for the layers that serve nothing else."""

    rows: torch.Tensor  # (sampled,) int64 rows of the batch
    attention: "AttentionFn"  # paged attention with one query per sampled row


class AttentionFn(Protocol):
    """The engine's paged attention, called by every layer of the adapter's forward."""

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None,
        write: bool = True,
    ) -> torch.Tensor:
        """q (tokens, heads, head_dim), k/v (tokens, kv_heads, head_dim) -> (tokens, heads, head_dim).

        `window`: a sliding-window layer's span in tokens (each query sees the last `window` tokens up to
        itself); None attends to the whole context. `write=False`: k and v are already in `layer`'s cache, written
        by that layer earlier in this forward (Gemma 4's KV-sharing layers attend over another layer's KV).
        """
        ...


class ChatProcessor(ABC):
    """Tokenizer and chat template of a family, rendered one segment at a time."""

    @property
    @abstractmethod
    def stop_token_ids(self) -> set[int]:
        """Token ids that end an assistant turn (end-of-turn, end-of-text)."""

    @abstractmethod
    def render_message(self, role: str, content, *, first: bool, images=None) -> Segment:
        """One message as it appears in the full-history rendering.

        Args:
            role: "system", "user", "assistant", "tool".
            content: the message text, or a list of text and image parts (vision-language models).
            first: True for the conversation's first message (templates may add a default system prompt).
            images: PIL images for a string message (vision-language models only).
        """

    @abstractmethod
    def generation_prompt(self) -> Segment:
        """The tokens that open an assistant turn (e.g. "<|im_start|>assistant\\n")."""

    @abstractmethod
    def close_turn(self, generated: list[int]) -> Segment:
        """The tokens that end an assistant turn whose generated tokens are `generated`."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Plain text to token ids, no special tokens added."""

    @abstractmethod
    def decode(self, token_ids: list[int]) -> str:
        """Token ids to text, special tokens skipped."""


class ModelAdapter(nn.Module, ABC):
    """A model family behind one interface: shape, positions, packed forward, logits."""

    shape: ModelShape
    processor: ChatProcessor | None
    name: str

    def segment_positions(self, segment: Segment, next_position: int) -> tuple[list, int]:
        """Positions of a segment's tokens and the position after it.

        Text models number tokens consecutively; M-RoPE families override this.
        Args:
            segment: the tokens being appended (segment.positions, when set, win).
            next_position: the position after the sequence's last token.
        Returns:
            (one position per token, the next position after the segment)
        """
        if segment.positions is not None:
            assert len(segment.positions) == len(segment.token_ids)
            last = segment.positions[-1] if segment.positions else next_position - 1
            return list(segment.positions), (max(last) if isinstance(last, tuple | list) else last) + 1
        n = len(segment.token_ids)
        return list(range(next_position, next_position + n)), next_position + n

    @property
    def dtype(self) -> torch.dtype:
        """The floating dtype activations and the KV cache use."""
        return next(p.dtype for p in self.parameters() if p.dtype.is_floating_point)

    def init_buffers(self) -> None:
        """Recompute non-persistent buffers after the module was materialised with `to_empty`."""

    def check_segment(self, segment: Segment) -> None:
        """Raise DossierError when a segment about to be appended is malformed for this family."""
        if segment.mm_items:
            raise DossierError(f"{self.name} is a text-only model; it cannot take images")

    def encode_multimodal(self, items: list[MultimodalItem]) -> list[Any]:
        """Encoder outputs of `items` (one batched call), for the forward to merge at their placeholders."""
        raise DossierError(f"{self.name} is a text-only model; it cannot take images")

    @abstractmethod
    def forward(self, batch: ForwardBatch, attention: AttentionFn) -> torch.Tensor:
        """Hidden states (tokens, hidden) of a packed batch, writing every layer's K/V through `attention`."""

    @abstractmethod
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (rows, vocab) in float32 for the selected hidden rows."""
