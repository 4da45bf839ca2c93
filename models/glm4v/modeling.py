"""GLM-4V / GLM-4.1V over the engine's paged KV cache.

Its LM is GLM-4: q/k/v biases, RMSNorm also on the attention and MLP outputs ("sandwich"
norms), a fused gate/up projection in the checkpoint, and RoPE on only part of each head
(`partial_rotary_factor`, 0.5 in the published models) rotating adjacent channel pairs.
Its M-RoPE sections ([8, 12, 12]) split those rotary frequencies into time, height and
width; image positions follow the same rule as Qwen2-VL's. The vision tower is the HF
module (it resamples learned position embeddings to each image's grid).
"""

from models.base import ChatProcessor
from models.vision import VisionProcessor
from models.vision_language.modeling import DecoderSpec, VisionLanguageAdapter, mrope_axes
from tools.errors import DossierError

__all__ = ["Glm4vAdapter", "SUPPORTED_MODEL_TYPES", "decoder_spec"]

SUPPORTED_MODEL_TYPES = ("glm4v",)


def decoder_spec(config) -> DecoderSpec:
    """GLM-4V's decoder switches, as transformers' Glm4vTextModel reads its config."""
    text = config.text_config
    params = text.rope_parameters or {}
    head_dim = text.hidden_size // text.num_attention_heads
    rotary_dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    axes = mrope_axes(params.get("mrope_section", [8, 12, 12]), rotary_dim // 2)
    return DecoderSpec(head_dim, rotary_dim, axes, qkv_bias=True, sandwich_norms=True, pairs=True)


class Glm4vAdapter(VisionLanguageAdapter):
    """A GLM-4V model behind the engine's adapter interface."""

    fused_gate_up = True

    def __init__(self, config, processor: ChatProcessor | None, vision: VisionProcessor, name: str = "glm4v") -> None:
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise DossierError(f"model type {config.model_type!r} is not a GLM-4V model")
        from transformers.models.glm4v.modeling_glm4v import Glm4vVisionModel

        super().__init__(config, processor, vision, name, decoder_spec(config), Glm4vVisionModel)
