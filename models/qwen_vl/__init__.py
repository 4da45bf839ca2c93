"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: forward over the paged cache, inputs and image sizing."""

from models.qwen_vl.modeling import SUPPORTED_MODEL_TYPES, QwenVLAdapter, decoder_spec
from models.qwen_vl.processing import QWEN2_VL_INPUTS, QWEN3_VL_INPUTS, family_inputs

__all__ = ["QWEN2_VL_INPUTS", "QWEN3_VL_INPUTS", "QwenVLAdapter", "SUPPORTED_MODEL_TYPES", "decoder_spec", "family_inputs"]
