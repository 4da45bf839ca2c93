"""The one decoder layer of every family, driven by a spec the family reads off its HF config.

Llama, Qwen2, Qwen3, Gemma-3 and the language models of Qwen2/2.5/3-VL and GLM-4V are the
same pre-norm transformer layer with small switches (`LayerSpec`): biases, RMSNorm over each
head of q and k (Qwen3, Gemma-3), norms on the attention and MLP outputs before the residual
add (GLM-4, Gemma-3), Gemma's RMSNorm scaling by (1 + weight), the MLP's activation, a
softmax scale other than head_dim^-0.5 (Gemma-3's query_pre_attn_scalar). Per layer the model
also says which rotary table it uses and whether it attends through a sliding window.

The layer follows transformers operation by operation (RMSNorm in float32, rotation, gated
MLP) so fp32 logits match the HF model to ~1e-6, with two changes for speed: q/k/v and
gate/up are fused into one matmul each (and q and k rotated in one op when no per-head norm
sits between), and it runs on a packed batch of many sequences, calling the engine's paged
attention (`AttentionFn`) with its window.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models import cpu_matmul
from models.base import AttentionFn
from models.batch_invariant import row_tiles
from models.rotary import RopeSpec, Rotary

__all__ = ["DecoderLayer", "DecoderSpec", "LayerSpec", "RMSNorm", "layer_windows", "text_decoder"]


class RMSNorm(nn.Module):
    """RMSNorm in float32; scales by `offset + weight` (Gemma: offset 1, weights stored around 0)."""

    def __init__(self, size: int, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.offset = offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.offset:
            return (x * (self.offset + self.weight.float())).to(dtype)
        return self.weight * x.to(dtype)


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """What distinguishes one family's decoder layer from another's."""

    hidden: int  # model width
    intermediate: int  # MLP width
    heads: int  # query heads
    kv_heads: int  # key/value heads (GQA)
    head_dim: int  # channels per head
    eps: float  # RMSNorm epsilon
    activation: str = "silu"  # MLP gate activation (transformers' ACT2FN name)
    qkv_bias: bool = False  # biases on the q/k/v projections
    o_bias: bool = False  # bias on the output projection
    mlp_bias: bool = False  # biases on the MLP projections
    qk_norm: bool = False  # RMSNorm over each head of q and k before the rotation (Qwen3, Gemma-3)
    out_norms: bool = False  # RMSNorm on the attention and MLP outputs before each residual add (GLM-4, Gemma-3)
    norm_offset: float = 0.0  # every RMSNorm scales by offset + weight (Gemma: 1)
    attention_scale: float | None = None  # softmax scale; None: head_dim ** -0.5 (Gemma-3: query_pre_attn_scalar ** -0.5)
    attn_output_gate: bool = False  # q_proj also gives each head a gate: output * sigmoid(gate) (Qwen3.5, Qwen3-Next)


@dataclass(frozen=True, slots=True)
class DecoderSpec:
    """A family's language model: its layer, rotary positions, and per-layer choices."""

    layer: LayerSpec
    rope: RopeSpec
    num_layers: int  # decoder layers
    vocab_size: int  # embedding rows and logits columns
    max_positions: int  # longest sequence the model was trained for, in tokens
    tied: bool  # the output head is the embedding matrix
    windows: tuple[int | None, ...] = ()  # per layer: sliding window in tokens, None global; () all global
    layer_variants: tuple[str | None, ...] = ()  # per layer: its rotary table (RopeSpec.variants); () all the first
    embed_scale: float | None = None  # embeddings multiplied by this (Gemma: sqrt(hidden))
    logit_softcap: float | None = None  # final logits become cap * tanh(logits / cap)

    def __post_init__(self) -> None:
        for name in ("windows", "layer_variants"):
            value = getattr(self, name)
            assert not value or len(value) == self.num_layers, (name, len(value), self.num_layers)
        assert all(v in self.rope.variants for v in self.layer_variants), (self.layer_variants, self.rope.variants)


class DecoderLayer(nn.Module):
    """One pre-norm transformer layer over the paged cache."""

    def __init__(self, spec: LayerSpec, index: int, window: int | None = None, variant: str | None = None) -> None:
        super().__init__()
        from transformers.activations import ACT2FN

        self.spec, self.index, self.window, self.variant = spec, index, window, variant
        heads, kv_heads, head_dim, hidden = spec.heads, spec.kv_heads, spec.head_dim, spec.hidden
        q_width = heads * head_dim * (2 if spec.attn_output_gate else 1)
        self.qkv_proj = nn.Linear(hidden, q_width + 2 * kv_heads * head_dim, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=spec.o_bias)
        self.gate_up_proj = nn.Linear(hidden, 2 * spec.intermediate, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(spec.intermediate, hidden, bias=spec.mlp_bias)
        self.act = F.silu if spec.activation in ("silu", "swish") else ACT2FN[spec.activation]  # no module call for silu

        def norm(size: int) -> RMSNorm:
            return RMSNorm(size, spec.eps, spec.norm_offset)

        self.attn_norm, self.mlp_norm = norm(hidden), norm(hidden)
        self.q_norm = norm(head_dim) if spec.qk_norm else None
        self.k_norm = norm(head_dim) if spec.qk_norm else None
        self.attn_out_norm = norm(hidden) if spec.out_norms else None
        self.mlp_out_norm = norm(hidden) if spec.out_norms else None
        # sdpa scales by head_dim ** -0.5; another scale is folded into q
        self.q_scale = None if spec.attention_scale is None else spec.attention_scale * head_dim**0.5
        # Batch-invariant mode (models/batch_invariant.py): rows per call of the row-wise work; None runs each
        # step's rows in one call.
        self.row_tile: int | None = None

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], rotary: Rotary,
                attention: AttentionFn) -> torch.Tensor:
        spec, tokens = self.spec, x.shape[0]
        heads, kv_heads, head_dim = spec.heads, spec.kv_heads, spec.head_dim
        cos, sin = cos_sin  # (tokens, 1, rotary_dim)
        qkv = self._qkv(x)  # (tokens, (heads + 2 kv_heads) * head_dim), q's per-head gates first if any
        gate = None
        if spec.attn_output_gate:  # q_proj gave each head [query, gate] (Qwen3.5)
            q_gate, qkv = qkv.split([2 * heads * head_dim, 2 * kv_heads * head_dim], -1)
            q, gate = q_gate.view(tokens, heads, 2 * head_dim).chunk(2, -1)
            qkv = torch.cat([q.reshape(tokens, heads * head_dim), qkv], -1)
            gate = gate.reshape(tokens, heads * head_dim)
        if self.q_norm is None:
            qk, v = qkv.split([(heads + kv_heads) * head_dim, kv_heads * head_dim], -1)
            qk = rotary.rotate(qk.view(tokens, heads + kv_heads, head_dim), cos, sin)  # q and k in one op
            q, k = qk.split([heads, kv_heads], 1)
        else:
            q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
            q = rotary.rotate(self.q_norm(q.view(tokens, heads, head_dim)), cos, sin)
            k = rotary.rotate(self.k_norm(k.view(tokens, kv_heads, head_dim)), cos, sin)
        if self.q_scale is not None:
            q = q * self.q_scale
        attended = attention(self.index, q, k, v.view(tokens, kv_heads, head_dim), window=self.window)
        attended = attended.reshape(tokens, heads * head_dim)
        if gate is not None:
            attended = attended * torch.sigmoid(gate)
        x = x + self._attention_out(attended)
        return x + self._mlp_block(x)

    def _each(self, op, x: torch.Tensor) -> torch.Tensor:
        """op over the rows of x: in one call, or in tiles of `row_tile` rows (batch-invariant mode)."""
        return op(x) if self.row_tile is None else row_tiles(x, op, self.row_tile)

    def _project(self, linear: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """linear(x); in the batch-invariant mode in tiles through its packed weight, or in one call when the
        linear's rows are invariant at any height by construction (`height_invariant`: int8 with a pinned range)."""
        if self.row_tile is None or getattr(linear, "height_invariant", False):
            return cpu_matmul.linear(x, linear.weight, linear.bias) if type(linear) is nn.Linear else linear(x)
        tiled = linear.__dict__.get("tile_linear")
        return row_tiles(x, linear if tiled is None else lambda rows: tiled(linear, rows), self.row_tile)

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        return self._project(self.qkv_proj, self._each(self.attn_norm, x))

    def _attention_out(self, attended: torch.Tensor) -> torch.Tensor:
        out = self._project(self.o_proj, attended)
        return out if self.attn_out_norm is None else self._each(self.attn_out_norm, out)

    def _mlp_block(self, x: torch.Tensor) -> torch.Tensor:
        out = self.mlp(self._each(self.mlp_norm, x))
        return out if self.mlp_out_norm is None else self._each(self.mlp_out_norm, out)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """The gated MLP; without autograd a SiLU gate runs in place (no (tokens, intermediate) copies: same bits)."""
        gate_up = self._project(self.gate_up_proj, x)
        return self._project(self.down_proj, self._each(self._gate, gate_up))

    def _gate(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.split(self.spec.intermediate, -1)
        if self.act is F.silu and not torch.is_grad_enabled():
            return F.silu(gate, inplace=True).mul_(up)
        return self.act(gate) * up


def layer_windows(config) -> tuple[int | None, ...]:
    """Per layer, the sliding window of a transformers config with `layer_types` (None: global attention)."""
    types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    if not types or window is None:
        return ()
    return tuple(window if kind == "sliding_attention" else None for kind in types)


def text_decoder(config, *, rope: RopeSpec | None = None, **switches) -> DecoderSpec:
    """The DecoderSpec of a text config with Llama's field names; `switches` set LayerSpec fields.

    DecoderSpec fields among `switches` (windows, layer_variants, embed_scale, logit_softcap, tied) go there;
    `head_dim` overrides the config's.
    """
    head_dim = switches.pop("head_dim", None) or getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads)
    model_fields = {k: switches.pop(k) for k in ("windows", "layer_variants", "embed_scale", "logit_softcap", "tied")
                    if k in switches}
    activation = getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None) or "silu"
    layer = LayerSpec(
        hidden=config.hidden_size, intermediate=config.intermediate_size, heads=config.num_attention_heads,
        kv_heads=config.num_key_value_heads, head_dim=head_dim, eps=config.rms_norm_eps,
        **{"activation": activation, **switches},
    )
    model_fields.setdefault("windows", layer_windows(config))
    model_fields.setdefault("tied", bool(getattr(config, "tie_word_embeddings", False)))
    return DecoderSpec(
        layer=layer, rope=rope or RopeSpec(head_dim, head_dim), num_layers=config.num_hidden_layers,
        vocab_size=config.vocab_size, max_positions=config.max_position_embeddings, **model_fields,
    )
