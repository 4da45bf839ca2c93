"""The shared base of the M-RoPE vision-language families (Qwen2/2.5/3-VL, GLM-4V): adapter and inputs."""

from models.vision_language.modeling import VisionLanguageAdapter
from models.vision_language.processing import FamilyInputs, build_processors

__all__ = ["FamilyInputs", "VisionLanguageAdapter", "build_processors"]
