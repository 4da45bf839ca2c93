"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL over the engine's paged KV cache.

The LM of Qwen2-VL and Qwen2.5-VL is Qwen2 (q/k/v biases) with M-RoPE in contiguous
sections ([16, 24, 24] of the 64 frequencies: time, height, width). Qwen3-VL's is Qwen3
(RMSNorm on each head of q and k, no biases) with interleaved M-RoPE, and DeepStack:
features from three intermediate vision layers are added to the hidden states at the
image positions after the first three LM layers. The vision towers are the HF modules
(Qwen2.5-VL's uses window attention, Qwen3-VL's learned position embeddings).
"""

from models.base import ChatProcessor
from models.vision import VisionProcessor
from models.vision_language.modeling import DecoderSpec, VisionLanguageAdapter, mrope_axes
from tools.errors import DossierError

__all__ = ["QwenVLAdapter", "SUPPORTED_MODEL_TYPES", "decoder_spec"]

SUPPORTED_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


def _tower_class(model_type: str) -> type:
    if model_type == "qwen2_vl":
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel

        return Qwen2VisionTransformerPretrainedModel
    if model_type == "qwen2_5_vl":
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

        return Qwen2_5_VisionTransformerPretrainedModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    return Qwen3VLVisionModel


def decoder_spec(config) -> DecoderSpec:
    """The decoder switches of a Qwen-VL config, as transformers' text model reads them."""
    text = config.text_config
    params = text.rope_parameters or {}
    if config.model_type == "qwen3_vl":
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        axes = mrope_axes(params.get("mrope_section", [24, 20, 20]), head_dim // 2, interleaved=True)
        bias = bool(getattr(text, "attention_bias", False))
        return DecoderSpec(head_dim, head_dim, axes, qkv_bias=bias, o_bias=bias, qk_norm=True)
    head_dim = text.hidden_size // text.num_attention_heads  # Qwen2-VL's attention ignores config.head_dim
    return DecoderSpec(head_dim, head_dim, mrope_axes(params.get("mrope_section", [16, 24, 24]), head_dim // 2))


class QwenVLAdapter(VisionLanguageAdapter):
    """A Qwen2-VL, Qwen2.5-VL or Qwen3-VL model behind the engine's adapter interface."""

    def __init__(self, config, processor: ChatProcessor | None, vision: VisionProcessor, name: str = "qwen-vl") -> None:
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise DossierError(f"model type {config.model_type!r} is not a Qwen-VL model ({', '.join(SUPPORTED_MODEL_TYPES)})")
        if getattr(config.text_config, "use_sliding_window", False):
            raise DossierError(f"{name}: sliding-window attention is not supported")
        super().__init__(config, processor, vision, name, decoder_spec(config), _tower_class(config.model_type))
