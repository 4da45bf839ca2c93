"""The shared base of the M-RoPE vision-language families (Qwen2/2.5/3-VL, GLM-4V): forward, inputs, weights."""

from models.vision_language.modeling import DecoderSpec, VisionLanguageAdapter, mrope_axes
from models.vision_language.processing import FamilyInputs, build_processors

__all__ = ["DecoderSpec", "FamilyInputs", "VisionLanguageAdapter", "build_processors", "mrope_axes"]
