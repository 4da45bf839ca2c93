"""Gemma 4 with vision (Gemma4ForConditionalGeneration, `gemma4`: how google/gemma-4-E2B/E4B/31B-it are published).

The language model is the text family's (models/families/gemma4.py: two head shapes, KV-sharing layers,
per-layer inputs), with 1-D positions: an image's tokens are numbered like text. What the images add:
- every image is scaled, up or down with its aspect ratio kept, to fill a budget of tokens (`max_soft_tokens`,
  280 in the published processors): sides that are multiples of patch_size x pooling kernel (16 x 3), so each LM
  token is one 3 x 3 pool of 16-pixel patches (models/vision.py, rule "gemma4"); the token cost is known from
  the image's size before it is encoded;
- the tower is transformers' Gemma4VisionModel (patches with learned 2-D positions, its own 2-D RoPE, pooling by
  position, padding stripped) and the embedder (an RMS norm without weight and a projection to the LM width);
  several images go in one call, each padded to the longest with position (-1, -1) as the HF processor pads;
- an image's tokens see each other in both directions in the sliding-window layers only; the global layers stay
  causal (`ModelShape.bidirectional_window_only`: the engine leaves the image spans out of their metadata);
- the per-layer inputs read the pad token's row of their table at image tokens (transformers replaces image ids
  by the pad id there), and the projection part reads the image embeddings;
- the template writes `<|image|>` per image, which the HF processor expands to `<|image>` + one `<|image|>` per
  token + `<image|>` (`image_text`).
Audio and video inputs are not supported (the audio tower's tensors are skipped on load). Checkpoints keep
`model.language_model.*`, `model.vision_tower.*`, `model.embed_vision.*`; turns end with `<turn|>`.
"""

import dataclasses
from types import SimpleNamespace

import torch
from torch import nn

from models.families import gemma4
from models.family import FamilySpec
from models.vision_language.modeling import VisionLanguageAdapter
from models.vision_language.processing import FamilyInputs
from models.weights import WeightNames

__all__ = ["FAMILY", "Gemma4Tower", "Gemma4VisionAdapter"]

INPUTS = FamilyInputs(
    image_processor_class="Gemma4ImageProcessorPil", image_mean=(0.0, 0.0, 0.0), image_std=(1.0, 1.0, 1.0),
    default_min_pixels=48 * 48, default_max_pixels=280 * 48 * 48, rule="gemma4",
    start_token="<|image>", end_token="<image|>", stop_tokens=("<turn|>", "<eos>"),
    markers=(("image_token_id", "<|image|>"), ("boi_token_id", "<|image>"), ("eoi_token_id", "<image|>")),
    image_text=("<|image|>", "<|image><|image|><image|>"),
)
WEIGHTS = WeightNames(
    norms=gemma4.WEIGHTS.norms,
    prefixes=(("model.language_model.", "text"), ("model.vision_tower.", "visual:vision_tower."),
              ("model.embed_vision.", "visual:embed_vision."), ("model.audio_tower.", "skip"),
              ("model.embed_audio.", "skip"), ("lm_head.", "lm_head")),
    save_prefix="model.language_model.", tower_save_prefix="model.",
)


class Gemma4Tower(nn.Module):
    """Gemma4VisionModel over a batch of padded images, then the embedder to the LM width, as transformers'
    `Gemma4Model.get_image_features`; called as the engine calls every tower."""

    def __init__(self, config) -> None:
        from transformers.models.gemma4.modeling_gemma4 import Gemma4MultimodalEmbedder, Gemma4VisionModel

        super().__init__()
        self.vision_tower = Gemma4VisionModel._from_config(config.vision_config, attn_implementation="sdpa")
        self.embed_vision = Gemma4MultimodalEmbedder(config.vision_config, config.text_config)

    def init_buffers(self) -> None:
        """The tower's rotary frequencies (non-persistent buffers), after it was materialised with `to_empty`."""
        from transformers.models.gemma4.modeling_gemma4 import Gemma4VisionRotaryEmbedding

        for module in self.modules():
            if isinstance(module, Gemma4VisionRotaryEmbedding):
                device = self.embed_vision.embedding_projection.weight.device
                with torch.device("cpu"):
                    fresh = Gemma4VisionRotaryEmbedding(module.config)
                module.inv_freq = fresh.inv_freq.to(device)
                module.original_inv_freq = fresh.original_inv_freq.to(device)

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> SimpleNamespace:
        """pixel_values (images, patches, 3 * patch^2), grid_thw: the patches' (x, y) positions (images, patches, 2),
        (-1, -1) for padding -> `pooler_output` (every image's tokens, LM hidden)."""
        hidden = self.vision_tower(pixel_values=pixel_values, pixel_position_ids=grid_thw).last_hidden_state
        return SimpleNamespace(pooler_output=self.embed_vision(hidden))


class Gemma4VisionAdapter(VisionLanguageAdapter, gemma4.Gemma4Model):
    """The vision-language adapter (images over their placeholders, the tower) over Gemma 4's decoder."""

    def __init__(self, config, family, processor, vision, name: str = "vlm") -> None:
        super().__init__(config, family, processor, vision, name)
        self.shape = dataclasses.replace(self.shape, bidirectional_window_only=True)
        self.pad_token_id = self.text_config.pad_token_id

    def forward(self, batch, attention) -> torch.Tensor:
        x, rows = self.merge_images(batch, self.embed(batch.input_ids))
        ids = batch.input_ids if rows is None else batch.input_ids.index_fill(0, rows, self.pad_token_id)
        # (the per-layer table reads the pad row at images, as transformers)
        return self.run_layers(x, ids, batch.positions, attention, batch.sampled)


def _tower():
    from transformers.models.gemma4.modeling_gemma4 import Gemma4VisionModel

    return Gemma4VisionModel


FAMILY = FamilySpec(
    name="gemma4-vl", model_types=("gemma4",), config_class="Gemma4Config",
    reference_class="Gemma4ForConditionalGeneration", adapter=Gemma4VisionAdapter, decoder=gemma4.decoder,
    inputs=INPUTS,
    weights=WEIGHTS, vision_tower=_tower, build_tower=Gemma4Tower, bidirectional_images=True,
    # the text family's tiny switches (two head shapes, KV sharing, per-layer inputs, an 8-token window), its images'
    # bidirectional rule; a 2-layer tower of 4-pixel patches pooled 3 x 3, 70 tokens at most per image
    tiny=dict(text_config=dict(gemma4.FAMILY.tiny, use_bidirectional_attention="vision"), config=dict(),
              vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=4, head_dim=8, patch_size=4, pooling_kernel_size=3,
                                 position_embedding_size=64)),
)
