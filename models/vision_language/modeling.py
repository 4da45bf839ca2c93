"""Shared base of the M-RoPE vision-language families: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V.

The four families share one shape: a vision tower turns each image into one embedding per
placeholder token; a decoder-only LM reads text embeddings with the image embeddings
written over the placeholders, with 3-D rotary positions (temporal, height, width).

- The LM is our own forward over the engine's paged KV cache (fused q/k/v and gate/up
  projections, as `models/llama`), following the HF text model operation by operation.
  Families differ in small switches, gathered in `DecoderSpec`: q/k RMSNorm (Qwen3-VL),
  norms after attention and MLP (GLM-4V), which rotary channels each position axis
  drives (contiguous sections, or interleaved for Qwen3-VL), and rotation of halves or of
  adjacent pairs over part of the head (GLM-4V).
- The vision tower is the HF module of the family, built from the checkpoint's vision
  config: it needs no KV cache, and every image is encoded whole, so the engine batches
  the images of many sessions into one call and caches the outputs by content hash.
- M-RoPE positions are computed here for every appended segment, offset from the
  sequence's next position (the same rule as HF `get_rope_index`: text advances by one;
  an image of h x w merged patches at position p gets (p, p + row, p + col) and the next
  position is p + max(h, w)). Nothing is read from or stored on a model object's
  `rope_deltas`.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import AttentionFn, ChatProcessor, ForwardBatch, ModelAdapter, ModelShape, MultimodalItem, Segment
from models.llama.modeling import RMSNorm, rotate_half
from models.vision import ImageFeatures, VisionProcessor
from tools.errors import DossierError

__all__ = ["DecoderSpec", "VisionLanguageAdapter", "mrope_axes"]


@dataclass(frozen=True, slots=True)
class DecoderSpec:
    """What distinguishes one family's decoder layer from another's."""

    head_dim: int  # channels per attention head
    rotary_dim: int  # leading channels of a head that are rotated (all but GLM-4V's half)
    axes: tuple[int, ...]  # per rotary frequency: the position axis driving it (0 time, 1 height, 2 width)
    qkv_bias: bool = True  # biases on q/k/v projections
    o_bias: bool = False  # bias on the output projection
    qk_norm: bool = False  # RMSNorm over each head of q and k before RoPE (Qwen3-VL)
    sandwich_norms: bool = False  # RMSNorm on the attention and MLP outputs too (GLM-4V)
    pairs: bool = False  # rotate adjacent channel pairs (GLM-4V) instead of the two halves


def mrope_axes(sections: list[int], half: int, interleaved: bool = False) -> tuple[int, ...]:
    """The position axis of each of the `half` rotary frequencies.

    Contiguous (Qwen2/2.5-VL, GLM-4V): the first sections[0] frequencies follow time, the next
    sections[1] height, the rest width. Interleaved (Qwen3-VL): height drives frequencies
    1, 4, 7, ... below 3 * sections[1], width 2, 5, 8, ... below 3 * sections[2], time the rest.
    """
    if interleaved:
        axes = [0] * half
        for axis in (1, 2):
            for i in range(axis, min(3 * sections[axis], half), 3):
                axes[i] = axis
        return tuple(axes)
    if sum(sections) != half:
        raise DossierError(f"mrope_section {sections} must sum to {half} (half the rotary channels of a head)")
    return tuple(axis for axis, size in enumerate(sections) for _ in range(size))


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """GLM's rotation: (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


class DecoderLayer(nn.Module):
    """One LM layer of the M-RoPE families over the paged cache."""

    def __init__(self, config, index: int, spec: DecoderSpec) -> None:
        super().__init__()
        from transformers.activations import ACT2FN

        hidden = config.hidden_size
        self.index, self.spec = index, spec
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, spec.head_dim
        self.qkv_proj = nn.Linear(hidden, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=spec.o_bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if spec.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if spec.qk_norm else None
        self.intermediate = config.intermediate_size
        self.gate_up_proj = nn.Linear(hidden, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, hidden, bias=False)
        self.act = ACT2FN[config.hidden_act]
        self.input_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        if spec.sandwich_norms:
            self.post_self_attn_layernorm = RMSNorm(hidden, config.rms_norm_eps)
            self.post_mlp_layernorm = RMSNorm(hidden, config.rms_norm_eps)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        rot = self.spec.rotary_dim
        turn = rotate_pairs if self.spec.pairs else rotate_half
        if rot == self.head_dim:
            return x * cos + turn(x) * sin
        moving, fixed = x[..., :rot], x[..., rot:]
        return torch.cat((moving * cos + turn(moving) * sin, fixed), dim=-1)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attention: AttentionFn) -> torch.Tensor:
        tokens = x.shape[0]
        qkv = self.qkv_proj(self.input_layernorm(x))  # (tokens, (heads + 2 kv_heads) * head_dim)
        q, k, v = qkv.split([self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], -1)
        q = q.view(tokens, self.heads, self.head_dim)
        k = k.view(tokens, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)  # cos/sin (tokens, 1, rotary_dim)
        attended = attention(self.index, q, k, v.view(tokens, self.kv_heads, self.head_dim))
        out = self.o_proj(attended.reshape(tokens, self.heads * self.head_dim))
        if self.spec.sandwich_norms:
            out = self.post_self_attn_layernorm(out)
        x = x + out
        gate, up = self.gate_up_proj(self.post_attention_layernorm(x)).split(self.intermediate, -1)
        out = self.down_proj(self.act(gate) * up)
        if self.spec.sandwich_norms:
            out = self.post_mlp_layernorm(out)
        return x + out


class VisionLanguageAdapter(ModelAdapter):
    """A vision-language family as the engine sees it; family subclasses give the spec and the tower class.

    Build with `from_config` under `torch.device("meta")`, materialise, then `load_weights`.
    """

    fused_gate_up = False  # the checkpoint stores mlp.gate_up_proj (GLM-4V) rather than gate_proj + up_proj

    def __init__(self, config, processor: ChatProcessor | None, vision: VisionProcessor, name: str,
                 spec: DecoderSpec, tower_class: type) -> None:
        super().__init__()
        text = config.text_config
        params = text.rope_parameters or {}
        if params.get("rope_type", "default") != "default":
            raise DossierError(f"{name}: RoPE type {params.get('rope_type')!r} is not supported (only the default M-RoPE)")
        self.config, self.text_config, self.spec = config, text, spec
        self.processor, self.vision, self.name = processor, vision, name
        self.shape = ModelShape(
            num_layers=text.num_hidden_layers, num_kv_heads=text.num_key_value_heads, head_dim=spec.head_dim,
            vocab_size=text.vocab_size, max_positions=text.max_position_embeddings, position_dims=3,
        )
        self.image_token_id = config.image_token_id
        self.embed_tokens = nn.Embedding(text.vocab_size, text.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(text, i, spec) for i in range(text.num_hidden_layers))
        self.norm = RMSNorm(text.hidden_size, text.rms_norm_eps)
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        self.lm_head = None if self.tied else nn.Linear(text.hidden_size, text.vocab_size, bias=False)
        self.visual = tower_class._from_config(config.vision_config, attn_implementation="sdpa")
        self.init_buffers()

    # --- buffers -----------------------------------------------------------------

    def init_buffers(self) -> None:
        """RoPE frequencies of the LM and of the vision tower, recomputed on the weights' device (after `to_empty`)."""
        device = self.embed_tokens.weight.device
        base = self.text_config.rope_parameters["rope_theta"]
        dim = self.spec.rotary_dim
        with torch.device("cpu"):
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
            axes = torch.tensor(self.spec.axes, dtype=torch.long)
            fresh = {name: type(m)(m.config) for name, m in self.visual.named_modules() if hasattr(m, "inv_freq")}
        if device.type == "meta":
            self.inv_freq, self.axes = inv_freq, axes
            return
        self.inv_freq, self.axes = inv_freq.to(device), axes.to(device)
        for name, module in fresh.items():  # the tower's non-persistent rotary buffers
            target = self.visual.get_submodule(name)
            for buffer_name, buffer in module.named_buffers(recurse=False):
                target._buffers[buffer_name] = buffer.to(device)

    # --- positions ---------------------------------------------------------------

    def check_segment(self, segment: Segment) -> None:
        """Every image placeholder token of an appended segment belongs to an image, and vice versa."""
        covered = 0
        for item in segment.mm_items:
            span = segment.token_ids[item.offset : item.offset + item.length]
            if len(span) != item.length or any(t != self.image_token_id for t in span):
                raise DossierError(f"{self.name}: an image's {item.length} tokens must all be image placeholders")
            covered += item.length
        placeholders = segment.token_ids.count(self.image_token_id)
        if placeholders != covered:
            raise DossierError(
                f"{self.name}: the segment has {placeholders} image placeholder tokens but its images fill {covered}; "
                "append images with session.append_message(role, content, images=[...])"
            )

    def segment_positions(self, segment: Segment, next_position: int) -> tuple[list, int]:
        """3-D positions (time, height, width) of a segment's tokens, offset from `next_position`."""
        if segment.positions is not None:
            return super().segment_positions(segment, next_position)
        merge = self.vision.sizing.merge_size
        positions: list[tuple[int, int, int]] = []
        p, cursor = next_position, 0
        for item in sorted(segment.mm_items, key=lambda i: i.offset):
            positions.extend((q, q, q) for q in range(p, p + item.offset - cursor))
            p += item.offset - cursor
            t, gh, gw = item.data.grid_thw
            rows, cols = gh // merge, gw // merge
            assert t == 1 and rows * cols == item.length, (item.data.grid_thw, item.length)
            positions.extend((p, p + r, p + c) for r in range(rows) for c in range(cols))
            p += max(rows, cols)
            cursor = item.offset + item.length
        tail = len(segment.token_ids) - cursor
        positions.extend((q, q, q) for q in range(p, p + tail))
        return positions, p + tail

    # --- vision ------------------------------------------------------------------

    @torch.inference_mode()
    def encode_multimodal(self, items: list[MultimodalItem]) -> list[ImageFeatures]:
        """Encode the images of `items` in one call of the vision tower."""
        tower_dtype = next(self.visual.parameters()).dtype
        device = self.embed_tokens.weight.device
        pixel_values, grid = self.vision.pixel_values([item.data for item in items])
        out = self.visual(pixel_values.to(device, tower_dtype), grid_thw=grid.to(device))
        sizes = [item.length for item in items]
        embeds = out.pooler_output.split(sizes)  # (tokens, hidden) per image
        assert all(e.shape[0] == n for e, n in zip(embeds, sizes)), "vision tower gave a different token count"
        deepstack = [d.split(sizes) for d in (getattr(out, "deepstack_features", None) or [])]
        return [ImageFeatures(e, [d[i] for d in deepstack]) for i, e in enumerate(embeds)]

    # --- forward -----------------------------------------------------------------

    def _rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin (tokens, 1, rotary_dim) for positions (3, tokens), each frequency driven by its axis."""
        if positions.dim() == 1:
            positions = positions.unsqueeze(0).expand(3, -1)
        chosen = positions.index_select(0, self.axes).float()  # (rotary_dim / 2, tokens)
        freqs = chosen.T * self.inv_freq  # (tokens, rotary_dim / 2)
        angles = freqs.repeat_interleave(2, dim=-1) if self.spec.pairs else torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(dtype).unsqueeze(1), angles.sin().to(dtype).unsqueeze(1)

    def forward(self, batch: ForwardBatch, attention: AttentionFn) -> torch.Tensor:
        x = self.embed_tokens(batch.input_ids)  # (tokens, hidden)
        rows, deepstack = None, []
        if batch.mm_chunks:
            spans = [torch.arange(c.batch_offset, c.batch_offset + c.stop - c.start) for c in batch.mm_chunks]
            rows = torch.cat(spans).to(x.device)
            embeds = torch.cat([c.encoded.embeds[c.start : c.stop] for c in batch.mm_chunks])
            x = x.index_copy(0, rows, embeds.to(x.dtype))  # image embeddings over their placeholders
            levels = len(batch.mm_chunks[0].encoded.deepstack)
            deepstack = [
                torch.cat([c.encoded.deepstack[level][c.start : c.stop] for c in batch.mm_chunks]).to(x.dtype)
                for level in range(levels)
            ]
        cos, sin = self._rotary(batch.positions, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, attention)
            if i < len(deepstack):  # Qwen3-VL adds intermediate vision features after the first layers
                x = x.index_add(0, rows, deepstack[i])
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.embed_tokens.weight if self.tied else self.lm_head.weight
        return F.linear(hidden, weight).float()

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy checkpoint tensors (published or transformers-5 names) into place."""
        from models.vision_language.weights import load_weights

        load_weights(self, tensors)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under transformers 5 names, e.g. to build the HF reference model."""
        from models.vision_language.weights import hf_state_dict

        return hf_state_dict(self)
