"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: three families sharing inputs and one decoder recipe.

The LM of Qwen2-VL and Qwen2.5-VL is Qwen2 (q/k/v biases) with M-RoPE in contiguous
sections ([16, 24, 24] of the 64 frequencies: time, height, width). Qwen3-VL's is Qwen3
(RMSNorm on each head of q and k, no biases) with interleaved M-RoPE, and DeepStack:
features from three intermediate vision layers are added to the hidden states at the
image positions after the first three LM layers. The vision towers are the HF modules
(Qwen2.5-VL's uses window attention, Qwen3-VL's learned position embeddings).

Inputs: ChatML with `<|vision_start|><|image_pad|><|vision_end|>`. Qwen2-VL and Qwen2.5-VL
patch images at 14 pixels and merge 2x2 patches into one token (a 28x28 square per token),
normalised with CLIP's mean and std; Qwen3-VL patches at 16 (32x32 per token), normalised to
[-1, 1]. Default size bounds are qwen-vl-utils': 4 to 16,384 tokens per image; a model
folder's `preprocessor_config.json` or the caller's `min_pixels` / `max_pixels` override them.
"""

from models.decoder import text_decoder
from models.family import FamilySpec
from models.rotary import RopeSpec, mrope_axes
from models.vision_language.modeling import VisionLanguageAdapter
from models.vision_language.processing import FamilyInputs
from models.vision_language.shapes import TINY_TEXT, marker_ids
from models.weights import TEXT_WEIGHTS, VL_PREFIXES, WeightNames

__all__ = ["QWEN2_5_VL", "QWEN2_VL", "QWEN3_VL"]

_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_STOPS = ("<|im_end|>", "<|endoftext|>")
_MARKERS = (("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
            ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))
QWEN2_VL_INPUTS = FamilyInputs(
    image_processor_class="Qwen2VLImageProcessorPil", image_mean=_CLIP_MEAN, image_std=_CLIP_STD,
    default_min_pixels=4 * 28 * 28, default_max_pixels=16384 * 28 * 28, rule="qwen",
    start_token="<|vision_start|>", end_token="<|vision_end|>", stop_tokens=_STOPS, markers=_MARKERS,
)
QWEN3_VL_INPUTS = FamilyInputs(
    image_processor_class="Qwen2VLImageProcessorPil", image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5),
    default_min_pixels=4 * 32 * 32, default_max_pixels=16384 * 32 * 32, rule="qwen",
    start_token="<|vision_start|>", end_token="<|vision_end|>", stop_tokens=_STOPS, markers=_MARKERS,
)
WEIGHTS = WeightNames(norms=TEXT_WEIGHTS.norms, prefixes=VL_PREFIXES, save_prefix="model.language_model.")


def qwen2_vl_decoder(config):
    """Qwen2(-.5)-VL's LM: Qwen2 with contiguous M-RoPE sections; its attention ignores config.head_dim."""
    text = config.text_config
    head_dim = text.hidden_size // text.num_attention_heads
    axes = mrope_axes((text.rope_parameters or {}).get("mrope_section", [16, 24, 24]), head_dim // 2)
    return text_decoder(text, rope=RopeSpec(head_dim, head_dim, axes), head_dim=head_dim, qkv_bias=True,
                        tied=bool(config.tie_word_embeddings), windows=())


def qwen3_vl_decoder(config):
    """Qwen3-VL's LM: Qwen3 (q/k norm) with interleaved M-RoPE."""
    text = config.text_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    axes = mrope_axes((text.rope_parameters or {}).get("mrope_section", [24, 20, 20]), head_dim // 2, interleaved=True)
    bias = bool(getattr(text, "attention_bias", False))
    return text_decoder(text, rope=RopeSpec(head_dim, head_dim, axes), qkv_bias=bias, o_bias=bias, qk_norm=True,
                        tied=bool(config.tie_word_embeddings), windows=())


_QWEN_IDS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653)
_Q25_7B_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
                      tokens_per_second=2, hidden_act="silu")
_Q2_VISION = dict(depth=32, embed_dim=1280, num_heads=16, mlp_ratio=4, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, hidden_act="quick_gelu")
_MROPE = dict(rope_type="default", rope_theta=1e6, mrope_section=[16, 24, 24])
_TINY_ROPE = dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3]))
_PIXELS_28 = (28 * 28, 84 * 84)  # 1 to 9 tokens per image: fast tests


def _qwen2_tower():
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel

    return Qwen2VisionTransformerPretrainedModel


def _qwen2_5_tower():
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

    return Qwen2_5_VisionTransformerPretrainedModel


def _qwen3_tower():
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    return Qwen3VLVisionModel


_Q2_TINY = dict(text_config=_TINY_ROPE, vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2),
                pixels=_PIXELS_28)
QWEN2_VL = FamilySpec(
    name="qwen2-vl", model_types=("qwen2_vl",), config_class="Qwen2VLConfig",
    reference_class="Qwen2VLForConditionalGeneration", adapter=VisionLanguageAdapter, decoder=qwen2_vl_decoder,
    inputs=QWEN2_VL_INPUTS, weights=WEIGHTS, vision_tower=_qwen2_tower, tiny=_Q2_TINY,
    shapes={
        "qwen2-vl-tiny": dict(text_config=dict(TINY_TEXT, **_Q2_TINY["text_config"]),
                              vision_config=_Q2_TINY["vision_config"], **marker_ids(QWEN2_VL_INPUTS)),
        "qwen2-vl-2b": dict(
            text_config=dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                             num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                             rms_norm_eps=1e-6, rope_parameters=_MROPE),
            vision_config=dict(_Q2_VISION, hidden_size=1536), tie_word_embeddings=True, **_QWEN_IDS),
        "qwen2-vl-7b": dict(
            text_config=dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                             num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                             rms_norm_eps=1e-6, rope_parameters=_MROPE),
            vision_config=dict(_Q2_VISION, hidden_size=3584), **_QWEN_IDS),
    },
)

_Q25_TINY = dict(text_config=_TINY_ROPE, pixels=_PIXELS_28,
                 vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64,
                                    window_size=56, fullatt_block_indexes=[1]))
QWEN2_5_VL = FamilySpec(
    name="qwen2.5-vl", model_types=("qwen2_5_vl",), config_class="Qwen2_5_VLConfig",
    reference_class="Qwen2_5_VLForConditionalGeneration", adapter=VisionLanguageAdapter, decoder=qwen2_vl_decoder,
    inputs=QWEN2_VL_INPUTS, weights=WEIGHTS, vision_tower=_qwen2_5_tower, tiny=_Q25_TINY,
    shapes={
        "qwen2.5-vl-tiny": dict(text_config=dict(TINY_TEXT, **_Q25_TINY["text_config"]),
                                vision_config=_Q25_TINY["vision_config"], **marker_ids(QWEN2_VL_INPUTS)),
        # CPU benchmarks
        "qwen2.5-vl-small": dict(
            text_config=dict(vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                             num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=32768,
                             initializer_range=0.25, rope_parameters=dict(rope_type="default", rope_theta=1e6,
                                                                          mrope_section=[4, 6, 6])),
            vision_config=dict(depth=4, hidden_size=128, intermediate_size=256, num_heads=4, out_hidden_size=256,
                               window_size=112, fullatt_block_indexes=[1, 3]), **marker_ids(QWEN2_VL_INPUTS)),
        "qwen2.5-vl-3b": dict(
            text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                             num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=128000,
                             rms_norm_eps=1e-6, rope_parameters=_MROPE),
            vision_config=dict(_Q25_7B_VISION, out_hidden_size=2048), tie_word_embeddings=True, **_QWEN_IDS),
        "qwen2.5-vl-7b": dict(
            text_config=dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                             num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=128000,
                             rms_norm_eps=1e-6, rope_parameters=_MROPE),
            vision_config=dict(_Q25_7B_VISION, out_hidden_size=3584), **_QWEN_IDS),
    },
)

_Q3_TINY = dict(
    text_config=dict(head_dim=16, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[4, 2, 2],
                                                       mrope_interleaved=True)),
    vision_config=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, patch_size=16,
                       num_position_embeddings=64, deepstack_visual_indexes=[0, 1]),
    pixels=(32 * 32, 96 * 96),
)
QWEN3_VL = FamilySpec(
    name="qwen3-vl", model_types=("qwen3_vl",), config_class="Qwen3VLConfig",
    reference_class="Qwen3VLForConditionalGeneration", adapter=VisionLanguageAdapter, decoder=qwen3_vl_decoder,
    inputs=QWEN3_VL_INPUTS, weights=WEIGHTS, vision_tower=_qwen3_tower, tiny=_Q3_TINY,
    shapes={"qwen3-vl-tiny": dict(text_config=dict(TINY_TEXT, **_Q3_TINY["text_config"]),
                                  vision_config=_Q3_TINY["vision_config"], **marker_ids(QWEN3_VL_INPUTS))},
)
