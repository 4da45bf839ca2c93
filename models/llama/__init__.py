"""Llama-family text models (Llama 2/3, SmolLM2, Qwen2): forward over the paged cache, processing."""

from models.llama.modeling import SUPPORTED_MODEL_TYPES, LlamaAdapter
from models.llama.processing import LlamaProcessor

__all__ = ["LlamaAdapter", "LlamaProcessor", "SUPPORTED_MODEL_TYPES"]
