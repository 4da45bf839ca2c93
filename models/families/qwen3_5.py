"""Qwen3.5 text models: three Gated DeltaNet (linear-attention) layers to every gated full-attention layer.

transformers' Qwen3_5ForCausalLM (`qwen3_5_text`) is the reference. Per `config.layer_types`:
- "full_attention": Qwen3's layer (RMSNorm over each head of q and k) with q_proj also giving each
  head an output gate (the attention output times sigmoid(gate) before o_proj) and RoPE on the first
  `partial_rotary_factor` of each head (a quarter in the published models), halves rotated;
- "linear_attention": `models/linear_attention.py`, which keeps a fixed-size state per sequence
  instead of KV (`engine/core/recurrent_state.py`).
Every RMSNorm except the DeltaNet's gated one scales by (1 + weight), weights stored around 0.

`QWEN3_5_VL` is the multimodal form, the published checkpoints (`qwen3_5`): the same text model with
interleaved M-RoPE and Qwen3-VL's inputs, and transformers' Qwen3_5VisionModel as the tower.

Prefix sharing goes through state checkpoints (engine/core/recurrent_state.py). What is not here yet
(issue 49): a memory budget that counts the states (the KV pool is sized for the full-attention layers
only; states are allocated per sequence as it starts), the batch-invariant mode, and the CUDA kernels
(the PyTorch reference runs there).
"""

import dataclasses

from models.decoder import text_decoder
from models.decoder_model import DecoderModel
from models.family import FamilySpec
from models.linear_attention import GatedDeltaNetLayer, LinearSpec
from models.families.qwen_vl import QWEN3_VL_INPUTS, WEIGHTS as VL_WEIGHTS
from models.rotary import RopeSpec, mrope_axes
from models.text_inputs import TextInputs
from models.vision_language.modeling import VisionLanguageAdapter
from models.vision_language.shapes import TINY_TEXT, marker_ids
from models.weights import TEXT_PREFIXES, TEXT_WEIGHTS

__all__ = ["FAMILY", "QWEN3_5_VL", "HybridDecoderModel", "HybridVisionLanguageAdapter"]


def decoder(config):
    """The text model's switches; for the multimodal config, its text_config's, with interleaved M-RoPE."""
    text = config.get_text_config()
    params = text.rope_parameters or {}
    head_dim = text.head_dim
    rotary_dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    axes = None
    if text is not config:  # positions are (time, height, width) in the multimodal model, as in Qwen3-VL
        axes = mrope_axes(params.get("mrope_section", [11, 11, 10]), rotary_dim // 2, interleaved=True)
    bias = bool(getattr(text, "attention_bias", False))
    return text_decoder(text, rope=RopeSpec(head_dim, rotary_dim, axes), head_dim=head_dim, qkv_bias=bias,
                        o_bias=bias, qk_norm=True, norm_offset=1.0, attn_output_gate=True, windows=(),
                        tied=bool(getattr(config, "tie_word_embeddings", False)))


def _tower():
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

    return Qwen3_5VisionModel


def _linear_layers(adapter) -> None:
    """Make the adapter's "linear_attention" layers Gated DeltaNet layers, and KV only the others'."""
    linear = LinearSpec(adapter.text_config)
    kinds = adapter.text_config.layer_types
    for i, kind in enumerate(kinds):
        if kind == "linear_attention":
            adapter.layers[i] = GatedDeltaNetLayer(adapter.spec.layer, linear, i)
    # only the full-attention layers keep KV blocks; the others a state per sequence
    adapter.shape = dataclasses.replace(
        adapter.shape, kv_layers=tuple(i for i, kind in enumerate(kinds) if kind != "linear_attention"),
        state_bytes=linear.state_bytes() * sum(1 for kind in kinds if kind == "linear_attention"))


class HybridDecoderModel(DecoderModel):
    """DecoderModel whose "linear_attention" layers are Gated DeltaNet layers."""

    def __init__(self, config, family, processor, vision=None, name: str = "model") -> None:
        super().__init__(config, family, processor, vision, name)
        _linear_layers(self)


class HybridVisionLanguageAdapter(VisionLanguageAdapter):
    """The vision-language adapter (M-RoPE positions, the image tower) over the hybrid decoder."""

    def __init__(self, config, family, processor, vision, name: str = "model") -> None:
        super().__init__(config, family, processor, vision, name)
        _linear_layers(self)


_TINY_TEXT_FIELDS = dict(head_dim=16, num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4,
                         linear_key_head_dim=16, linear_value_head_dim=16,
                         layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"])

# A text-only Qwen3.5 checkpoint keeps the LM where the published (vision-language) ones do, under
# model.language_model, as transformers' own conversion for qwen3_5_text expects (a public fine-tune of the 2B
# is stored so: "model.language_model.layers.0.linear_attn.A_log", ...); one cut from a published checkpoint may
# still carry its tower and its multi-token-prediction head, which the text model does not use
# (tests/engine/test_hybrid.py: test_a_text_only_checkpoint_under_the_published_prefix_...).
TEXT_ONLY_WEIGHTS = dataclasses.replace(TEXT_WEIGHTS, prefixes=(
    ("model.language_model.", "text"), ("model.visual.", "skip"), ("mtp.", "skip"), *TEXT_PREFIXES))

FAMILY = FamilySpec(
    name="qwen3_5", model_types=("qwen3_5_text",), config_class="Qwen3_5TextConfig",
    reference_class="Qwen3_5ForCausalLM", adapter=HybridDecoderModel, decoder=decoder, inputs=TextInputs(),
    weights=TEXT_ONLY_WEIGHTS,
    tiny=dict(_TINY_TEXT_FIELDS, tie_word_embeddings=True),
    shapes={
        # llama-tiny's width, Qwen3.5's layer pattern and head layout, for engine benchmarks against HF's own cache
        "qwen3_5-tiny": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=8, num_attention_heads=8,
                             num_key_value_heads=2, head_dim=32, vocab_size=4096, max_position_embeddings=8192,
                             initializer_range=0.25, linear_num_key_heads=4, linear_num_value_heads=8,
                             linear_key_head_dim=32, linear_value_head_dim=32, tie_word_embeddings=True,
                             layer_types=["linear_attention"] * 3 + ["full_attention"]
                             + ["linear_attention"] * 3 + ["full_attention"]),
    },
)

_VL_TINY = dict(
    text_config=dict(_TINY_TEXT_FIELDS, rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                                      mrope_section=[2, 1, 1], mrope_interleaved=True)),
    vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, patch_size=16,
                       num_position_embeddings=64),
    pixels=(32 * 32, 96 * 96),
)
# The published checkpoints also hold the multi-token-prediction head (`mtp.*`, Qwen/Qwen3.5-0.8B's 15 tensors),
# which the engine does not use
PUBLISHED_WEIGHTS = dataclasses.replace(VL_WEIGHTS, prefixes=(("mtp.", "skip"), *VL_WEIGHTS.prefixes))
# The published Qwen3.5 checkpoints (Qwen3_5ForConditionalGeneration): the same text model under
# model.language_model, a Qwen3-VL-style tower without DeepStack, Qwen3-VL's ChatML and image markers.
QWEN3_5_VL = FamilySpec(
    name="qwen3_5-vl", model_types=("qwen3_5",), config_class="Qwen3_5Config",
    reference_class="Qwen3_5ForConditionalGeneration", adapter=HybridVisionLanguageAdapter, decoder=decoder,
    inputs=QWEN3_VL_INPUTS, weights=PUBLISHED_WEIGHTS, vision_tower=_tower, tiny=_VL_TINY,
    shapes={"qwen3_5-vl-tiny": dict(text_config=dict(TINY_TEXT, **_VL_TINY["text_config"]),
                                    vision_config=_VL_TINY["vision_config"], **marker_ids(QWEN3_VL_INPUTS))},
)
