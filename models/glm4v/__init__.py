"""GLM-4V / GLM-4.1V: forward over the paged cache and inputs."""

from models.glm4v.modeling import SUPPORTED_MODEL_TYPES, Glm4vAdapter, decoder_spec
from models.glm4v.processing import GLM4V_INPUTS

__all__ = ["GLM4V_INPUTS", "Glm4vAdapter", "SUPPORTED_MODEL_TYPES", "decoder_spec"]
