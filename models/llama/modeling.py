"""Llama-family causal LMs (Llama 2/3, SmolLM2, Qwen2 text) over the engine's paged KV cache.

Our own forward, weights taken from the Hugging Face checkpoint. It follows
transformers' `LlamaForCausalLM` operation by operation (RMSNorm in float32, RoPE
with duplicated halves, SiLU-gated MLP) so greedy outputs match HF `generate`, with
two changes for speed: q/k/v and gate/up projections are fused into one matmul each,
and it runs on a packed batch of many sequences, calling the engine's paged attention
for every layer.
"""

import torch
import torch.nn.functional as F
from torch import nn

from models.base import AttentionFn, ChatProcessor, ForwardBatch, ModelAdapter, ModelShape
from tools.errors import DossierError

__all__ = ["LlamaAdapter", "SUPPORTED_MODEL_TYPES"]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self, config, index: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.index = index
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // self.heads
        qkv_bias = getattr(config, "attention_bias", False) or config.model_type == "qwen2"
        self.qkv_proj = nn.Linear(hidden, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=getattr(config, "attention_bias", False))
        mlp_bias = getattr(config, "mlp_bias", False)
        self.intermediate = config.intermediate_size
        self.gate_up_proj = nn.Linear(hidden, 2 * config.intermediate_size, bias=mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, hidden, bias=mlp_bias)
        self.input_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(hidden, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attention: AttentionFn) -> torch.Tensor:
        tokens = x.shape[0]
        qkv = self.qkv_proj(self.input_layernorm(x))  # (tokens, (heads + 2 kv_heads) * head_dim)
        qk, v = qkv.split([(self.heads + self.kv_heads) * self.head_dim, self.kv_heads * self.head_dim], -1)
        qk = qk.view(tokens, self.heads + self.kv_heads, self.head_dim)
        qk = qk * cos + rotate_half(qk) * sin  # q and k rotated together; cos/sin (tokens, 1, head_dim)
        q, k = qk.split([self.heads, self.kv_heads], 1)
        v = v.view(tokens, self.kv_heads, self.head_dim)
        attended = attention(self.index, q, k, v)  # (tokens, heads, head_dim)
        x = x + self.o_proj(attended.reshape(tokens, self.heads * self.head_dim))
        gate, up = self.gate_up_proj(self.post_attention_layernorm(x)).split(self.intermediate, -1)
        return x + self.down_proj(F.silu(gate) * up)


class LlamaAdapter(ModelAdapter):
    """A Llama-family model as the engine sees it; build with `from_config` then `load_weights`."""

    def __init__(self, config, processor: ChatProcessor | None, name: str = "llama") -> None:
        super().__init__()
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise DossierError(
                f"model type {config.model_type!r} is not a Llama-family model (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        if getattr(config, "use_sliding_window", False):
            raise DossierError(f"{name}: sliding-window attention is not supported")
        self.config = config
        self.processor = processor
        self.name = name
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.shape = ModelShape(
            num_layers=config.num_hidden_layers,
            num_kv_heads=config.num_key_value_heads,
            head_dim=head_dim,
            vocab_size=config.vocab_size,
            max_positions=config.max_position_embeddings,
        )
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        self.lm_head = None if self.tied else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.init_buffers()

    def init_buffers(self) -> None:
        """(Re)compute the RoPE frequencies in float32 on the weights' device (after `to_empty`)."""
        with torch.device("cpu"):
            inv_freq, self.rope_scaling = _rope_frequencies(self.config, self.shape.head_dim)
        device = self.embed_tokens.weight.device
        self.inv_freq = inv_freq if device.type == "meta" else inv_freq.to(device)

    def forward(self, batch: ForwardBatch, attention: AttentionFn) -> torch.Tensor:
        if batch.mm_chunks:
            raise DossierError(f"{self.name} is a text-only model; it cannot take images")
        x = self.embed_tokens(batch.input_ids)  # (tokens, hidden)
        freqs = batch.positions[:, None].float() * self.inv_freq.float()  # (tokens, head_dim / 2)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos = (angles.cos() * self.rope_scaling).to(x.dtype).unsqueeze(1)  # (tokens, 1, head_dim)
        sin = (angles.sin() * self.rope_scaling).to(x.dtype).unsqueeze(1)
        for layer in self.layers:
            x = layer(x, cos, sin, attention)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.embed_tokens.weight if self.tied else self.lm_head.weight
        return F.linear(hidden, weight).float()

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy Hugging Face checkpoint tensors (`model.layers.0.self_attn.q_proj.weight`, ...) into place."""
        def take(name: str) -> torch.Tensor:
            if name not in tensors:
                raise DossierError(f"{self.name}: checkpoint has no tensor {name!r}; is it a {self.config.model_type} model?")
            return tensors[name]

        with torch.no_grad():
            self.embed_tokens.weight.copy_(take("model.embed_tokens.weight"))
            self.norm.weight.copy_(take("model.norm.weight"))
            if self.lm_head is not None:
                self.lm_head.weight.copy_(tensors.get("lm_head.weight", take("model.embed_tokens.weight")))
            for i, layer in enumerate(self.layers):
                p = f"model.layers.{i}."
                attn = [p + f"self_attn.{n}_proj" for n in "qkv"]
                layer.qkv_proj.weight.copy_(torch.cat([take(n + ".weight") for n in attn]))
                if layer.qkv_proj.bias is not None:
                    layer.qkv_proj.bias.copy_(torch.cat([take(n + ".bias") for n in attn]))
                layer.o_proj.weight.copy_(take(p + "self_attn.o_proj.weight"))
                if layer.o_proj.bias is not None:
                    layer.o_proj.bias.copy_(take(p + "self_attn.o_proj.bias"))
                layer.gate_up_proj.weight.copy_(
                    torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")])
                )
                layer.down_proj.weight.copy_(take(p + "mlp.down_proj.weight"))
                if layer.gate_up_proj.bias is not None:
                    layer.gate_up_proj.bias.copy_(torch.cat([take(p + "mlp.gate_proj.bias"), take(p + "mlp.up_proj.bias")]))
                    layer.down_proj.bias.copy_(take(p + "mlp.down_proj.bias"))
                layer.input_layernorm.weight.copy_(take(p + "input_layernorm.weight"))
                layer.post_attention_layernorm.weight.copy_(take(p + "post_attention_layernorm.weight"))


    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under Hugging Face names (fused projections split again), e.g. to build a reference model."""
        out = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm.weight}
        if self.lm_head is not None:
            out["lm_head.weight"] = self.lm_head.weight
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            sizes = [layer.heads * layer.head_dim, layer.kv_heads * layer.head_dim, layer.kv_heads * layer.head_dim]
            for name, part in zip("qkv", layer.qkv_proj.weight.split(sizes)):
                out[p + f"self_attn.{name}_proj.weight"] = part
            if layer.qkv_proj.bias is not None:
                for name, part in zip("qkv", layer.qkv_proj.bias.split(sizes)):
                    out[p + f"self_attn.{name}_proj.bias"] = part
            out[p + "self_attn.o_proj.weight"] = layer.o_proj.weight
            if layer.o_proj.bias is not None:
                out[p + "self_attn.o_proj.bias"] = layer.o_proj.bias
            if layer.gate_up_proj.bias is not None:
                gate_bias, up_bias = layer.gate_up_proj.bias.split(layer.intermediate)
                out[p + "mlp.gate_proj.bias"], out[p + "mlp.up_proj.bias"] = gate_bias, up_bias
                out[p + "mlp.down_proj.bias"] = layer.down_proj.bias
            gate, up = layer.gate_up_proj.weight.split(layer.intermediate)
            out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate, up
            out[p + "mlp.down_proj.weight"] = layer.down_proj.weight
            out[p + "input_layernorm.weight"] = layer.input_layernorm.weight
            out[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight
        return out


def _rope_frequencies(config, head_dim: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and cos/sin scale, as transformers computes them for this config."""
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)), 1.0
    if rope_type == "dynamic":
        raise DossierError("dynamic NTK RoPE scaling is not supported (positions must not change the frequencies)")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise DossierError(f"RoPE type {rope_type!r} is not supported")
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
    return inv_freq.float(), float(scaling)
