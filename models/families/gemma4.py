"""Gemma 4 text models (Gemma4ForCausalLM, `gemma4_text`: the E2B/E4B/31B language models).

transformers' Gemma4ForCausalLM is the reference. Gemma 4 keeps Gemma-3's layer (norms on the layer input,
the attention output, before and after the MLP, RMSNorm over each head of q and k, GELU-tanh MLP, embeddings
times sqrt(hidden), sliding-window layers interleaved with global ones, one RoPE table per layer kind) and
changes the rest:
- the two layer kinds have different heads: local layers `head_dim` (256) channels and `num_key_value_heads`,
  global layers `global_head_dim` (512) and, where `attention_k_eq_v`, `num_global_key_value_heads`; their KV
  go to the engine's two pools (the window pool has its own head shape, `ModelShape.window_kv_shape`);
- global layers use "proportional" RoPE: the whole 512-channel head is rotated by a table whose last
  (1 - partial_rotary_factor) frequencies are zero (transformers computes the table; ours reads it);
- a softmax scale of 1 (q and k are RMS-normalised per head), and v is RMS-normalised too, without a weight;
- `attention_k_eq_v`: a global layer has no v_proj (local layers keep theirs); its values are its keys before k's
  norm and rotation;
- KV sharing: the last `num_kv_shared_layers` layers compute only queries and attend over the KV of the last
  earlier layer of their kind (that layer's cache, read without a write: they keep no KV of their own), and
  with `use_double_wide_mlp` their MLP is twice as wide;
- per-layer inputs (PLE): a second embedding table gives each token a `hidden_size_per_layer_input`-wide
  vector per layer, mixed with a projection of the token's embedding; after its MLP each layer adds a gated
  projection of its vector (its own norm on the result), then scales the residual stream by `layer_scalar`;
- RMSNorm scales by its weight (not 1 + weight, as Gemma-3's did).

The MoE model (26B-A4B, `enable_moe_block`): beside each layer's dense MLP a router picks `top_k_experts` of
`num_experts` gated MLPs per token; their weighted sum and the dense MLP's output, each with its own norm, add
up (`Gemma4Router`, `Gemma4Experts`). Refused with a message: bidirectional attention over all tokens
(`use_bidirectional_attention="all"`, an encoder). Turns end with `<turn|>`.
"""

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from models import cpu_matmul
from models.base import SampledRows
from models.batch_invariant import row_tiles
from models.decoder import DecoderLayer, LayerSpec, RMSNorm, text_decoder
from models.decoder_model import DecoderModel
from models.family import FamilySpec
from models.rotary import RopeSpec
from models.text_inputs import TextInputs
from models.weights import TEXT_PREFIXES, WeightNames
from tools.errors import DossierError

__all__ = ["FAMILY", "Gemma4Layer", "Gemma4Model"]

# A text-only checkpoint saved by transformers keeps the LM under model.*; one cut from a published (multimodal)
# checkpoint under model.language_model.*, maybe with the towers, which the text model does not use.
WEIGHTS = WeightNames(
    norms=(("attn_norm", "input_layernorm"), ("attn_out_norm", "post_attention_layernorm"),
           ("mlp_norm", "pre_feedforward_layernorm"), ("mlp_out_norm", "post_feedforward_layernorm")),
    prefixes=(("model.language_model.", "text"), *((f"model.{part}.", "skip") for part in
              ("vision_tower", "audio_tower", "embed_vision", "embed_audio")), *TEXT_PREFIXES))


class Gemma4Norm(RMSNorm):
    """Gemma 4's RMSNorm, operation by operation as transformers computes it: float32, x * (ms + eps) ** -0.5,
    times the weight in float32 (`scaled=False`: no weight, Gemma 4's norm on v)."""

    def __init__(self, size: int, eps: float, scaled: bool = True) -> None:
        super().__init__(size, eps)
        if not scaled:
            del self.weight
            self.weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        if self.weight is not None:
            x = x * self.weight.float()
        return x.to(dtype)


def _check(text) -> None:
    if text.num_kv_shared_layers >= text.num_hidden_layers:
        raise DossierError(f"this Gemma 4 config shares KV in all {text.num_hidden_layers} layers "
                           f"(num_kv_shared_layers={text.num_kv_shared_layers}): no layer computes the KV they share")
    if getattr(text, "use_bidirectional_attention", None) == "all":
        raise DossierError("a Gemma 4 config with use_bidirectional_attention='all' attends both ways over every "
                           "token (an encoder), not a causal LM")


def decoder(config):
    """The switches of the local layers (the global layers' heads differ: `Gemma4Model.make_layer`)."""
    text = config.get_text_config()
    _check(text)
    kinds = tuple(text.layer_types)
    variants = tuple(sorted(set(kinds)))
    dims = tuple(text.per_layer_config[kind].head_dim for kind in variants)  # each kind rotates its whole head
    # transformers refuses head_dim and num_key_value_heads on the whole config (they differ by layer kind)
    local = text.per_layer_config[kinds.index("sliding_attention") if "sliding_attention" in kinds else 0]
    bias = bool(text.attention_bias)
    return text_decoder(
        local, qkv_bias=bias, o_bias=bias, qk_norm=True, out_norms=True, activation=text.hidden_activation,
        attention_scale=1.0, embed_scale=text.hidden_size**0.5, logit_softcap=text.final_logit_softcapping,
        rope=RopeSpec(local.head_dim, local.head_dim, variants=variants, variant_dims=dims), layer_variants=kinds,
        tied=bool(getattr(config, "tie_word_embeddings", True)),
    )


class Gemma4Router(nn.Module):
    """Gemma 4's expert router (26B-A4B): RMS norm without weight, times a learned scale and hidden ** -0.5, a
    projection to the experts, softmax in float32, the top k renormalised and times each expert's own scale."""

    _each, _project = DecoderLayer._each, DecoderLayer._project  # row tiles in the batch-invariant mode

    def __init__(self, hidden: int, experts: int, top_k: int, eps: float) -> None:
        super().__init__()
        self.norm = Gemma4Norm(hidden, eps, scaled=False)
        self.proj = nn.Linear(hidden, experts, bias=False)
        self.scale = nn.Parameter(torch.ones(hidden))
        self.per_expert_scale = nn.Parameter(torch.ones(experts))
        self.top_k, self.root = top_k, hidden**-0.5
        self.row_tile: int | None = None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights (tokens, k) float32, expert indices (tokens, k)) for x (tokens, hidden)."""
        scores = self._project(self.proj, self._each(self.norm, x) * self.scale * self.root)
        weights, index = torch.topk(torch.softmax(scores, dim=-1, dtype=torch.float32), k=self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights * self.per_expert_scale[index], index


class Gemma4Experts(nn.Module):
    """The experts' gated MLPs as transformers stores them (gate_up_proj (experts, 2 x width, hidden), down_proj
    (experts, hidden, width)); each expert runs on the rows routed to it, its output weighted and summed in expert
    order. In the batch-invariant mode each expert's rows go through in row tiles."""

    def __init__(self, experts: int, hidden: int, width: int, activation) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * width, hidden))
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, width))
        self.act = activation
        self.row_tile: int | None = None

    def _linear(self, rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.row_tile is None:
            return cpu_matmul.linear(rows, weight)
        return row_tiles(rows, lambda part: F.linear(part, weight), self.row_tile)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for expert in torch.unique(index).tolist():
            token, slot = torch.where(index == expert)
            gate, up = self._linear(x[token], self.gate_up_proj[expert]).chunk(2, dim=-1)
            routed = self._linear(self.act(gate) * up, self.down_proj[expert]) * weights[token, slot, None]
            out.index_add_(0, token, routed.to(out.dtype))
        return out


class Gemma4Layer(DecoderLayer):
    """A Gemma 4 decoder layer: DecoderLayer's projections and norms with Gemma 4's attention and per-layer input.

    `producer`: the layer whose KV this one attends over (a KV-sharing layer: queries only), None for its own.
    """

    def __init__(self, spec: LayerSpec, index: int, window: int | None, variant: str | None, *,
                 producer: int | None, k_eq_v: bool, per_layer: int, moe: tuple[int, int, int] | None = None) -> None:
        super().__init__(spec, index, window, variant)
        hidden, heads, kv_heads, head_dim = spec.hidden, spec.heads, spec.kv_heads, spec.head_dim
        self.producer, self.k_eq_v = producer, k_eq_v and producer is None
        kv_width = 0 if producer is not None else kv_heads * head_dim * (1 if self.k_eq_v else 2)
        self.qkv_proj = nn.Linear(hidden, heads * head_dim + kv_width, bias=spec.qkv_bias)
        for name in ("attn_norm", "mlp_norm", "attn_out_norm", "mlp_out_norm"):
            setattr(self, name, Gemma4Norm(hidden, spec.eps))
        self.q_norm = Gemma4Norm(head_dim, spec.eps)
        self.k_norm = None if producer is not None else Gemma4Norm(head_dim, spec.eps)
        self.v_norm = Gemma4Norm(head_dim, spec.eps, scaled=False)
        self.per_layer = per_layer
        if per_layer:
            self.per_layer_input_gate = nn.Linear(hidden, per_layer, bias=False)
            self.per_layer_projection = nn.Linear(per_layer, hidden, bias=False)
            self.post_per_layer_input_norm = Gemma4Norm(hidden, spec.eps)
        self.layer_scalar = nn.Parameter(torch.ones(1), requires_grad=False)
        self.router = self.experts = None
        if moe is not None:  # (experts, top k, expert width): a sparse MLP beside the dense one (26B-A4B)
            experts, top_k, width = moe
            self.router = Gemma4Router(spec.hidden, experts, top_k, spec.eps)
            self.experts = Gemma4Experts(experts, spec.hidden, width, self.act)
            for name in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2"):
                setattr(self, name, Gemma4Norm(spec.hidden, spec.eps))

    def forward(self, x: torch.Tensor, cos_sin, rotary, attention, per_layer_input: torch.Tensor | None = None,
                shared: dict | None = None) -> torch.Tensor:
        """x (tokens, hidden); per_layer_input (tokens, per_layer); `shared`: this forward's KV by layer, which
        KV-sharing layers read."""
        spec, tokens = self.spec, x.shape[0]
        heads, kv_heads, head_dim = spec.heads, spec.kv_heads, spec.head_dim
        cos, sin = cos_sin
        qkv = self._qkv(x)
        q = rotary.rotate(self.q_norm(qkv[:, : heads * head_dim].view(tokens, heads, head_dim)), cos, sin)
        q = q * self.q_scale  # a softmax scale of 1 (sdpa scales by head_dim ** -0.5)
        if self.producer is None:
            k = qkv[:, heads * head_dim : (heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
            v = k if self.k_eq_v else qkv[:, (heads + kv_heads) * head_dim :].view(tokens, kv_heads, head_dim)
            k = rotary.rotate(self.k_norm(k), cos, sin)
            v = self.v_norm(v)
            shared[self.index] = k, v
            attended = attention(self.index, q, k, v, window=self.window)
        else:
            k, v = shared[self.producer]
            attended = attention(self.producer, q, k, v, window=self.window, write=False)
        x = x + self._attention_out(attended.reshape(tokens, heads * head_dim))
        x = x + self._mlp_block(x)
        if self.per_layer:
            gate = self.act(self._project(self.per_layer_input_gate, x)) * per_layer_input
            x = x + self._each(self.post_per_layer_input_norm, self._project(self.per_layer_projection, gate))
        return x * self.layer_scalar

    def _mlp_block(self, x: torch.Tensor) -> torch.Tensor:
        """The dense MLP and, with experts, their sum: post-norm(dense) + post-norm(experts(pre-norm(x))), both
        reading the residual stream x, then the layer's norm on the sum (transformers' order)."""
        out = self.mlp(self._each(self.mlp_norm, x))
        if self.experts is not None:
            weights, index = self.router(x)
            routed = self.experts(self._each(self.pre_feedforward_layernorm_2, x), weights, index)
            out = (self._each(self.post_feedforward_layernorm_1, out)
                   + self._each(self.post_feedforward_layernorm_2, routed))
        return self._each(self.mlp_out_norm, out)

    def hf_sources(self, p: str) -> list[tuple[str, list[str]]]:
        """(our parameter, the HF tensors concatenated into it): the attention, per-layer input, scalar, experts."""
        kinds = "q" if self.producer is not None else "qk" if self.k_eq_v else "qkv"
        attn = [p + f"self_attn.{n}_proj" for n in kinds]
        out = [(p + "qkv_proj.weight", [n + ".weight" for n in attn]),
               (p + "o_proj.weight", [p + "self_attn.o_proj.weight"]),
               (p + "q_norm.weight", [p + "self_attn.q_norm.weight"]), (p + "layer_scalar", [p + "layer_scalar"])]
        if self.qkv_proj.bias is not None:
            out += [(p + "qkv_proj.bias", [n + ".bias" for n in attn]),
                    (p + "o_proj.bias", [p + "self_attn.o_proj.bias"])]
        if self.k_norm is not None:
            out.append((p + "k_norm.weight", [p + "self_attn.k_norm.weight"]))
        if self.per_layer:
            out += [(p + f"{n}.weight", [p + f"{n}.weight"])
                    for n in ("per_layer_input_gate", "per_layer_projection", "post_per_layer_input_norm")]
        if self.experts is not None:  # the same names in both
            out += [(p + n, [p + n]) for n in (
                "router.proj.weight", "router.scale", "router.per_expert_scale", "experts.gate_up_proj",
                "experts.down_proj", "post_feedforward_layernorm_1.weight", "post_feedforward_layernorm_2.weight",
                "pre_feedforward_layernorm_2.weight")]
        return out

    def hf_rows(self, hf_name: str) -> int:
        """Output rows of one HF projection fused into ours (this layer's own head shape and MLP width)."""
        spec = self.spec
        if ".q_proj." in hf_name:
            return spec.heads * spec.head_dim
        if ".k_proj." in hf_name or ".v_proj." in hf_name:
            return spec.kv_heads * spec.head_dim
        return spec.intermediate


class PerLayerInputs(nn.Module):
    """Gemma 4's per-layer inputs (PLE): per token and layer, (norm(projection of the embedding) + its row of the
    per-layer table) / sqrt(2), as transformers' get_per_layer_inputs and project_per_layer_inputs."""

    _each, _project = DecoderLayer._each, DecoderLayer._project  # row tiles in the batch-invariant mode

    def __init__(self, text) -> None:
        super().__init__()
        self.layers, self.width = text.num_hidden_layers, text.hidden_size_per_layer_input
        self.embed_tokens_per_layer = nn.Embedding(text.vocab_size_per_layer_input, self.layers * self.width)
        self.per_layer_model_projection = nn.Linear(text.hidden_size, self.layers * self.width, bias=False)
        self.per_layer_projection_norm = Gemma4Norm(self.width, text.rms_norm_eps)
        self.projection_scale = text.hidden_size**-0.5
        self.row_tile: int | None = None

    def forward(self, input_ids: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """(tokens, layers, width) for token ids (tokens,) and their scaled embeddings (tokens, hidden)."""
        tokens = input_ids.shape[0]
        table = self.embed_tokens_per_layer(input_ids)
        table = table * torch.tensor(self.width**0.5, dtype=table.dtype)
        projected = self._project(self.per_layer_model_projection, embeds) * self.projection_scale
        projected = self._each(self.per_layer_projection_norm, projected.view(tokens, self.layers, self.width))
        return (projected + table.view(tokens, self.layers, self.width)) * 2.0**-0.5


class Gemma4Model(DecoderModel):
    """DecoderModel with Gemma 4's layers, per-layer inputs and two KV head shapes."""

    def __init__(self, config, family, processor, vision=None, name: str = "model") -> None:
        super().__init__(config, family, processor, vision, name)
        text = self.text_config
        self.norm = Gemma4Norm(text.hidden_size, text.rms_norm_eps)
        self.per_layer = PerLayerInputs(text) if text.hidden_size_per_layer_input else None
        own = tuple(i for i, layer in enumerate(self.layers) if layer.producer is None)
        windowed = tuple(i for i in own if self.layers[i].window is not None)
        global_layer = next(self.layers[i] for i in own if self.layers[i].window is None)
        local = self.spec.layer
        self.shape = dataclasses.replace(
            self.shape, kv_layers=own, num_kv_heads=global_layer.spec.kv_heads, head_dim=global_layer.spec.head_dim,
            window_layers=windowed if self.shape.window_layers else (), window_kv_heads=local.kv_heads,
            window_head_dim=local.head_dim)
        first_shared = next((i for i, layer in enumerate(self.layers) if layer.producer is not None), None)
        self.shape = dataclasses.replace(self.shape, sampled_only_from=first_shared)
        if not self.shape.window_layers and windowed:
            raise DossierError(f"{name}: Gemma 4's local and global layers keep KV of different shapes, which needs "
                               "one sliding window for every local layer (the config has several)")

    def make_layer(self, index: int, window: int | None, variant: str | None) -> nn.Module:
        text = self.text_config
        layer = text.per_layer_config[index]
        modes = text.kv_sharing_modes
        spec = dataclasses.replace(self.spec.layer, head_dim=layer.head_dim, kv_heads=layer.num_key_value_heads)
        producer = None
        if modes[index] == "reuse":
            kind = text.layer_types[index]
            first_shared = text.num_hidden_layers - text.num_kv_shared_layers
            producer = max(i for i in range(first_shared) if text.layer_types[i] == kind)
            if text.use_double_wide_mlp:
                spec = dataclasses.replace(spec, intermediate=2 * spec.intermediate)
        k_eq_v = bool(text.attention_k_eq_v) and text.layer_types[index] != "sliding_attention"  # global layers only
        moe = (text.num_experts, text.top_k_experts, text.moe_intermediate_size) if text.enable_moe_block else None
        return Gemma4Layer(spec, index, window, variant, producer=producer, k_eq_v=k_eq_v,
                           per_layer=text.hidden_size_per_layer_input or 0, moe=moe)

    def forward(self, batch, attention) -> torch.Tensor:
        if batch.mm_chunks:
            raise DossierError(f"{self.name} is a text-only model; it cannot take images")
        x = self.embed(batch.input_ids)
        return self.run_layers(x, batch.input_ids, batch.positions, attention, batch.sampled)

    def run_layers(self, x: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor, attention,
                   sampled: SampledRows | None = None) -> torch.Tensor:
        """The layers and final norm over embeddings x (tokens, hidden); `ids` index the per-layer input table.

        `sampled`: the KV-sharing layers, which keep no KV, run on those rows alone (their output reaches nothing
        else), as transformers computes them for the kept logits only; the result is then those rows'."""
        per_layer = None if self.per_layer is None else self.per_layer(ids, x)
        tables = self.rotary.cos_sin(positions, x.dtype)
        shared: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for i, layer in enumerate(self.layers):
            if sampled is not None and i == self.shape.sampled_only_from:
                if not len(sampled.rows):
                    return x[:0]
                x, attention, rows = x[sampled.rows], sampled.attention, sampled.rows
                tables = {kind: (cos[rows], sin[rows]) for kind, (cos, sin) in tables.items()}
                per_layer = None if per_layer is None else per_layer[rows]
                shared = {j: (k[rows], v[rows]) for j, (k, v) in shared.items()}
            x = layer(x, tables[layer.variant], self.rotary, attention, None if per_layer is None else per_layer[:, i],
                      shared)
        return self.norm(x)

    def hf_sources(self) -> list[tuple[str, list[str]]]:
        """The per-layer input tensors (transformers keeps them on the text model)."""
        if self.per_layer is None:
            return []
        return [(f"per_layer.{n}.weight", [f"{n}.weight"])
                for n in ("embed_tokens_per_layer", "per_layer_model_projection", "per_layer_projection_norm")]

    @torch.no_grad()
    def random_init(self, seed: int = 0) -> None:
        super().random_init(seed)
        for layer in self.layers:
            layer.layer_scalar.fill_(1.0)
            if layer.router is not None:  # scales of 1, as transformers initialises them
                layer.router.scale.fill_(1.0)
                layer.router.per_expert_scale.fill_(1.0)


# Six layers: two local and two global layers that keep KV, then one KV-sharing layer of each kind (twice as wide an
# MLP; a global layer's output reaches a later layer's KV, so a wrong mask there shows in the logits); local and
# global heads of different sizes and counts, keys that are the values on the global layers, 8-channel per-layer
# inputs (a table of 512 rows, above the tests' vocabulary), a window of 8 under prompts of up to 41, proportional
# RoPE on a quarter of the global heads, soft-capped logits.
_TINY = dict(head_dim=16, global_head_dim=32, num_key_value_heads=2, num_global_key_value_heads=1,
             attention_k_eq_v=True, num_kv_shared_layers=2, use_double_wide_mlp=True, sliding_window=8,
             num_hidden_layers=6, hidden_size_per_layer_input=8, vocab_size_per_layer_input=512,
             final_logit_softcapping=3.0, tie_word_embeddings=True,
             layer_types=["sliding_attention", "full_attention"] * 3)

FAMILY = FamilySpec(
    name="gemma4", model_types=("gemma4_text",), config_class="Gemma4TextConfig", reference_class="Gemma4ForCausalLM",
    adapter=Gemma4Model, decoder=decoder, inputs=TextInputs(stop_tokens=("<turn|>", "<eos>")), weights=WEIGHTS,
    tiny=_TINY,
    shapes={
        # llama-tiny's width with Gemma 4's layer pattern (a global layer in four, the last four sharing KV, two head
        # shapes, per-layer inputs), for engine benchmarks against transformers' own cache on a CPU
        "gemma4-tiny": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=8, num_attention_heads=8,
                            num_key_value_heads=2, head_dim=32, global_head_dim=64, num_global_key_value_heads=1,
                            attention_k_eq_v=True, num_kv_shared_layers=4, use_double_wide_mlp=True,
                            sliding_window=128, hidden_size_per_layer_input=32, vocab_size=4096,
                            vocab_size_per_layer_input=4096, max_position_embeddings=8192, initializer_range=0.25,
                            layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 2),
        # google/gemma-4-E2B-it's language model as its published tensor shapes give it (35 layers, a global one in
        # five, the last 20 sharing KV; tests/fixtures/checkpoints/gemma-4-e2b-it); window and RoPE: transformers'
        # defaults (no config.json could be found offline)
        "gemma4-e2b": dict(vocab_size=262144, hidden_size=1536, intermediate_size=6144, num_hidden_layers=35,
                           num_attention_heads=8, num_key_value_heads=1, head_dim=256, global_head_dim=512,
                           num_kv_shared_layers=20, use_double_wide_mlp=True, hidden_size_per_layer_input=256,
                           vocab_size_per_layer_input=262144, max_position_embeddings=131072,
                           layer_types=(["sliding_attention"] * 4 + ["full_attention"]) * 7),
    },
)
