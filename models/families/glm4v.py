"""GLM-4V / GLM-4.1V / GLM-4.6V: the GLM-4 decoder with M-RoPE over part of each head, and GLM's chat format.

GLM-4.6V (`glm46v`, transformers' Glm46VForConditionalGeneration) is the same model under its own config
class: a glm4v_text language model and a glm4v_vision tower, the same weight names and markers; it is
registered as a second family on the same parts (`GLM46V`).

Its LM is GLM-4: q/k/v biases, RMSNorm also on the attention and MLP outputs ("sandwich"
norms), a fused gate/up projection in the checkpoint, and RoPE on only part of each head
(`partial_rotary_factor`, 0.5 in the published models) rotating adjacent channel pairs.
Its M-RoPE sections ([8, 12, 12]) split those rotary frequencies into time, height and
width; image positions follow the same rule as Qwen2-VL's. The vision tower is the HF
module (it resamples learned position embeddings to each image's grid).

Inputs: `[gMASK]<sop>` then `<|system|>`, `<|user|>`, `<|assistant|>` turns; images as
`<|begin_of_image|><|image|><|end_of_image|>`. A GLM assistant turn has no closing token:
the model ends it by emitting the next role token (`<|user|>`, `<|observation|>`) or
`<|endoftext|>`, which are its stop tokens. The session does not repeat that token when
the next message starts with it. Images are patched at 14 pixels, 2x2 patches per token,
with GLM's own resize rule (two temporal frames counted against `max_pixels`; defaults
112x112 to 28x28x15000 pixels).
"""

from models.decoder import text_decoder
from models.family import FamilySpec
from models.rotary import RopeSpec, mrope_axes
from models.vision_language.modeling import VisionLanguageAdapter
from models.vision_language.processing import FamilyInputs
from models.vision_language.shapes import TINY_TEXT, marker_ids
from models.weights import VL_PREFIXES, WeightNames

__all__ = ["FAMILY", "GLM46V", "GLM4V_INPUTS"]

GLM4V_INPUTS = FamilyInputs(
    image_processor_class="Glm4vImageProcessorPil",
    image_mean=(0.48145466, 0.4578275, 0.40821073), image_std=(0.26862954, 0.26130258, 0.27577711),
    default_min_pixels=112 * 112, default_max_pixels=28 * 28 * 15000, rule="glm",
    start_token="<|begin_of_image|>", end_token="<|end_of_image|>",
    stop_tokens=("<|user|>", "<|observation|>", "<|endoftext|>"),
    markers=(("image_token_id", "<|image|>"), ("video_token_id", "<|video|>"),
             ("image_start_token_id", "<|begin_of_image|>"), ("image_end_token_id", "<|end_of_image|>"),
             ("video_start_token_id", "<|begin_of_video|>"), ("video_end_token_id", "<|end_of_video|>")),
)
WEIGHTS = WeightNames(
    norms=(("attn_norm", "input_layernorm"), ("attn_out_norm", "post_self_attn_layernorm"),
           ("mlp_norm", "post_attention_layernorm"), ("mlp_out_norm", "post_mlp_layernorm")),
    prefixes=VL_PREFIXES, save_prefix="model.language_model.", fused_gate_up=True,
)


def decoder(config):
    """GLM-4V's decoder switches, as transformers' Glm4vTextModel reads its config."""
    text = config.text_config
    params = text.rope_parameters or {}
    head_dim = text.hidden_size // text.num_attention_heads
    rotary_dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    axes = mrope_axes(params.get("mrope_section", [8, 12, 12]), rotary_dim // 2)
    return text_decoder(text, rope=RopeSpec(head_dim, rotary_dim, axes, pairs=True), head_dim=head_dim, qkv_bias=True,
                        out_norms=True, tied=bool(config.tie_word_embeddings), windows=())


def _tower():
    from transformers.models.glm4v.modeling_glm4v import Glm4vVisionModel

    return Glm4vVisionModel


_TINY = dict(
    text_config=dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                          mrope_section=[2, 1, 1])),
    vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, image_size=56),
    pixels=(28 * 28, 2 * 84 * 84),  # two temporal frames count against the bound
)

FAMILY = FamilySpec(
    name="glm4v", model_types=("glm4v",), config_class="Glm4vConfig", reference_class="Glm4vForConditionalGeneration",
    adapter=VisionLanguageAdapter, decoder=decoder, inputs=GLM4V_INPUTS, weights=WEIGHTS, vision_tower=_tower,
    tiny=_TINY,
    shapes={"glm4v-tiny": dict(text_config=dict(TINY_TEXT, **_TINY["text_config"]), vision_config=_TINY["vision_config"],
                               **marker_ids(GLM4V_INPUTS))},
)

GLM46V = FamilySpec(
    name="glm46v", model_types=("glm46v",), config_class="Glm46VConfig",
    reference_class="Glm46VForConditionalGeneration", adapter=VisionLanguageAdapter, decoder=decoder,
    inputs=GLM4V_INPUTS, weights=WEIGHTS, vision_tower=_tower, tiny=_TINY,
    shapes={"glm46v-tiny": dict(text_config=dict(TINY_TEXT, **_TINY["text_config"]),
                                vision_config=_TINY["vision_config"], **marker_ids(GLM4V_INPUTS))},
)
