"""Qwen3.5 text models: three Gated DeltaNet (linear-attention) layers to every gated full-attention layer.

transformers' Qwen3_5ForCausalLM (`qwen3_5_text`) is the reference. Per `config.layer_types`:
- "full_attention": Qwen3's layer (RMSNorm over each head of q and k) with q_proj also giving each
  head an output gate (the attention output times sigmoid(gate) before o_proj) and RoPE on the first
  `partial_rotary_factor` of each head (a quarter in the published models), halves rotated;
- "linear_attention": `models/linear_attention.py`, which keeps a fixed-size state per sequence
  instead of KV (`engine/core/recurrent_state.py`).
Every RMSNorm except the DeltaNet's gated one scales by (1 + weight), weights stored around 0.

What is not here yet (issue 49): the multimodal `qwen3_5` checkpoints (the published ones: this
family loads their text-only form), a memory budget that counts the states (the KV pool is sized for the
full-attention layers only; states are allocated per sequence as it starts), prefix sharing across sessions (off for this family: each session keeps its own
state between turns), the batch-invariant mode, and the CUDA kernels (the PyTorch reference runs there).
"""

import dataclasses

from models.decoder import text_decoder
from models.decoder_model import DecoderModel
from models.family import FamilySpec
from models.linear_attention import GatedDeltaNetLayer, LinearSpec
from models.rotary import RopeSpec
from models.text_inputs import TextInputs
from models.weights import TEXT_WEIGHTS

__all__ = ["FAMILY", "HybridDecoderModel"]


def decoder(config):
    params = config.rope_parameters or {}
    head_dim = config.head_dim
    rotary_dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    bias = bool(getattr(config, "attention_bias", False))
    return text_decoder(config, rope=RopeSpec(head_dim, rotary_dim), head_dim=head_dim, qkv_bias=bias, o_bias=bias,
                        qk_norm=True, norm_offset=1.0, attn_output_gate=True, windows=())


class HybridDecoderModel(DecoderModel):
    """DecoderModel whose "linear_attention" layers are Gated DeltaNet layers."""

    def __init__(self, config, family, processor, vision=None, name: str = "model") -> None:
        super().__init__(config, family, processor, vision, name)
        linear = LinearSpec(self.text_config)
        kinds = self.text_config.layer_types
        for i, kind in enumerate(kinds):
            if kind == "linear_attention":
                self.layers[i] = GatedDeltaNetLayer(self.spec.layer, linear, i)
        # only the full-attention layers keep KV blocks; the others a state per sequence
        self.shape = dataclasses.replace(self.shape, kv_layers=tuple(i for i, kind in enumerate(kinds)
                                                                     if kind != "linear_attention"))


FAMILY = FamilySpec(
    name="qwen3_5", model_types=("qwen3_5_text",), config_class="Qwen3_5TextConfig",
    reference_class="Qwen3_5ForCausalLM", adapter=HybridDecoderModel, decoder=decoder, inputs=TextInputs(),
    weights=TEXT_WEIGHTS,
    tiny=dict(head_dim=16, num_hidden_layers=4, tie_word_embeddings=True, linear_num_key_heads=2,
              linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
              layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"]),
)
