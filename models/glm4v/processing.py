"""Inputs of GLM-4V: `[gMASK]<sop>` then `<|system|>`, `<|user|>`, `<|assistant|>` turns; images as
`<|begin_of_image|><|image|><|end_of_image|>`.

A GLM assistant turn has no closing token: the model ends it by emitting the next role
token (`<|user|>`, `<|observation|>`) or `<|endoftext|>`, which are its stop tokens. The
session does not repeat that token when the next message starts with it. Images are
patched at 14 pixels, 2x2 patches per token, with GLM's own resize rule (two temporal
frames counted against `max_pixels`; defaults 112x112 to 28x28x15000 pixels).
"""

from models.vision_language.processing import FamilyInputs

__all__ = ["GLM4V_INPUTS"]

GLM4V_INPUTS = FamilyInputs(
    image_processor_class="Glm4vImageProcessorPil",
    image_mean=(0.48145466, 0.4578275, 0.40821073), image_std=(0.26862954, 0.26130258, 0.27577711),
    default_min_pixels=112 * 112, default_max_pixels=28 * 28 * 15000, rule="glm",
    start_token="<|begin_of_image|>", end_token="<|end_of_image|>",
    stop_tokens=("<|user|>", "<|observation|>", "<|endoftext|>"),
)
