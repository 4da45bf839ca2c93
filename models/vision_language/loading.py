"""Build a vision-language adapter from a local folder, or a random-weight shape for throughput figures.

Shapes: `qwen2-vl-tiny`, `qwen2.5-vl-tiny`, `qwen3-vl-tiny`, `glm4v-tiny` (smoke tests),
`qwen2.5-vl-small` (CPU benchmarks), and the published sizes `qwen2-vl-2b`, `qwen2-vl-7b`,
`qwen2.5-vl-3b`, `qwen2.5-vl-7b` (GPU figures). They have no tokenizer: sessions take token
ids, and images through `adapter.vision.image_segment(image)`.
"""

from pathlib import Path

import torch

from models.glm4v import GLM4V_INPUTS, Glm4vAdapter
from models.qwen_vl import QwenVLAdapter, family_inputs
from models.vision_language.modeling import VisionLanguageAdapter
from models.vision_language.processing import build_processors
from tools.errors import DossierError

__all__ = ["VL_MODEL_TYPES", "VL_SHAPES", "build_vl_adapter", "random_init", "vl_config"]

VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v")
_IDS = dict(image_token_id=4000, video_token_id=4001, vision_start_token_id=4002, vision_end_token_id=4003)
_QWEN_IDS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653)
_TINY_TEXT = dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=8192, initializer_range=0.25)
_Q25_7B_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
                      tokens_per_second=2, hidden_act="silu")
_Q2_VISION = dict(depth=32, embed_dim=1280, num_heads=16, mlp_ratio=4, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, hidden_act="quick_gelu")

# name -> (model_type, config kwargs); text_config / vision_config as dicts.
VL_SHAPES: dict[str, tuple[str, dict]] = {
    "qwen2-vl-tiny": ("qwen2_vl", dict(
        text_config=dict(_TINY_TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2), **_IDS)),
    "qwen2.5-vl-tiny": ("qwen2_5_vl", dict(
        text_config=dict(_TINY_TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64,
                           window_size=56, fullatt_block_indexes=[1]), **_IDS)),
    "qwen3-vl-tiny": ("qwen3_vl", dict(
        text_config=dict(_TINY_TEXT, head_dim=16, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                                        mrope_section=[4, 2, 2], mrope_interleaved=True)),
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, patch_size=16,
                           num_position_embeddings=64, deepstack_visual_indexes=[0, 1]), **_IDS)),
    "glm4v-tiny": ("glm4v", dict(
        text_config=dict(_TINY_TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                          partial_rotary_factor=0.5, mrope_section=[2, 1, 1])),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64,
                           image_size=56), image_token_id=4000, video_token_id=4001, image_start_token_id=4002,
        image_end_token_id=4003, video_start_token_id=4004, video_end_token_id=4005)),
    "qwen2.5-vl-small": ("qwen2_5_vl", dict(
        text_config=dict(vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=32768,
                         initializer_range=0.25, rope_parameters=dict(rope_type="default", rope_theta=1e6,
                                                                      mrope_section=[4, 6, 6])),
        vision_config=dict(depth=4, hidden_size=128, intermediate_size=256, num_heads=4, out_hidden_size=256,
                           window_size=112, fullatt_block_indexes=[1, 3]), **_IDS)),
    "qwen2-vl-2b": ("qwen2_vl", dict(
        text_config=dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
                         rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[16, 24, 24])),
        vision_config=dict(_Q2_VISION, hidden_size=1536), tie_word_embeddings=True, **_QWEN_IDS)),
    "qwen2-vl-7b": ("qwen2_vl", dict(
        text_config=dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                         num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768, rms_norm_eps=1e-6,
                         rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[16, 24, 24])),
        vision_config=dict(_Q2_VISION, hidden_size=3584), **_QWEN_IDS)),
    "qwen2.5-vl-3b": ("qwen2_5_vl", dict(
        text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                         num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=128000, rms_norm_eps=1e-6,
                         rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[16, 24, 24])),
        vision_config=dict(_Q25_7B_VISION, out_hidden_size=2048), tie_word_embeddings=True, **_QWEN_IDS)),
    "qwen2.5-vl-7b": ("qwen2_5_vl", dict(
        text_config=dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                         num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=128000, rms_norm_eps=1e-6,
                         rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[16, 24, 24])),
        vision_config=dict(_Q25_7B_VISION, out_hidden_size=3584), **_QWEN_IDS)),
}

_CONFIG_CLASSES = {"qwen2_vl": "Qwen2VLConfig", "qwen2_5_vl": "Qwen2_5_VLConfig", "qwen3_vl": "Qwen3VLConfig",
                   "glm4v": "Glm4vConfig"}


def vl_config(shape: str):
    """The HF config of a random-weight shape."""
    import transformers

    model_type, kwargs = VL_SHAPES[shape]
    return getattr(transformers, _CONFIG_CLASSES[model_type])(**kwargs)


def build_vl_adapter(config, folder: Path | None, name: str, device: str, dtype: torch.dtype,
                     min_pixels: int | None = None, max_pixels: int | None = None) -> VisionLanguageAdapter:
    """The adapter of a VL config with empty weights on `device` (load or initialise them next)."""
    if config.model_type not in VL_MODEL_TYPES:
        raise DossierError(f"model type {config.model_type!r} is not a vision-language family ({', '.join(VL_MODEL_TYPES)})")
    family = GLM4V_INPUTS if config.model_type == "glm4v" else family_inputs(config.model_type)
    processor, vision = build_processors(family, config, folder, min_pixels, max_pixels)
    adapter_class = Glm4vAdapter if config.model_type == "glm4v" else QwenVLAdapter
    with torch.device("meta"):
        adapter = adapter_class(config, processor, vision, name)
    adapter = adapter.to(dtype).to_empty(device=device)
    adapter.init_buffers()
    return adapter


@torch.no_grad()
def random_init(adapter: VisionLanguageAdapter, seed: int = 0) -> None:
    """Random weights: norms 1, biases 0, LM weights N(0, initializer_range), tower weights N(0, 0.02).

    Drawn on the weights' device, so a 7B shape initialises in seconds on a GPU. The output rows
    of the image/video marker tokens are zero, so greedy decoding never emits a placeholder (a
    trained model does not; a history holding one would be invalid input for the HF peer).
    """
    device = adapter.embed_tokens.weight.device
    generator = torch.Generator(device=device).manual_seed(seed)
    lm_std = getattr(adapter.text_config, "initializer_range", 0.02)
    for name, param in adapter.named_parameters():
        if "norm" in name or name.endswith(("ln_q.weight", "ln_q.bias")):
            param.fill_(1.0 if name.endswith("weight") else 0.0)
        elif name.endswith("bias"):
            param.zero_()
        else:
            std = 0.02 if name.startswith("visual.") else lm_std
            param.copy_(torch.empty(param.shape, dtype=torch.float32, device=device).normal_(0.0, std, generator=generator))
    config = adapter.config
    markers = [getattr(config, key, None) for key in ("image_token_id", "video_token_id", "vision_start_token_id",
                                                      "vision_end_token_id", "image_start_token_id", "image_end_token_id")]
    head = adapter.embed_tokens.weight if adapter.lm_head is None else adapter.lm_head.weight
    head[[m for m in markers if m is not None and m < head.shape[0]]] = 0.0
