"""Inputs of the Qwen-VL families: ChatML template with `<|vision_start|><|image_pad|><|vision_end|>`.

Qwen2-VL and Qwen2.5-VL patch images at 14 pixels and merge 2x2 patches into one token (a
28x28 square per token), normalised with CLIP's mean and std; Qwen3-VL patches at 16 (32x32
per token), normalised to [-1, 1]. Default size bounds are qwen-vl-utils': 4 to 16,384
tokens per image; a model folder's `preprocessor_config.json` or the caller's
`min_pixels` / `max_pixels` override them.
"""

from models.vision_language.processing import FamilyInputs

__all__ = ["QWEN2_VL_INPUTS", "QWEN3_VL_INPUTS", "family_inputs"]

_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_STOPS = ("<|im_end|>", "<|endoftext|>")

QWEN2_VL_INPUTS = FamilyInputs(
    image_processor_class="Qwen2VLImageProcessorPil", image_mean=_CLIP_MEAN, image_std=_CLIP_STD,
    default_min_pixels=4 * 28 * 28, default_max_pixels=16384 * 28 * 28, rule="qwen",
    start_token="<|vision_start|>", end_token="<|vision_end|>", stop_tokens=_STOPS,
)
QWEN3_VL_INPUTS = FamilyInputs(
    image_processor_class="Qwen2VLImageProcessorPil", image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5),
    default_min_pixels=4 * 32 * 32, default_max_pixels=16384 * 32 * 32, rule="qwen",
    start_token="<|vision_start|>", end_token="<|vision_end|>", stop_tokens=_STOPS,
)


def family_inputs(model_type: str) -> FamilyInputs:
    return QWEN3_VL_INPUTS if model_type == "qwen3_vl" else QWEN2_VL_INPUTS
