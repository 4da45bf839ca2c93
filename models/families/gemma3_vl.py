"""Gemma-3 with vision (Gemma3ForConditionalGeneration: gemma-3-4b/12b/27b-it): the Gemma-3 LM and a SigLIP tower.

The language model is the text family's (models/families/gemma3.py: sliding-window and global layers, two
RoPE tables, Gemma norms, scaled embeddings), with 1-D positions: an image's tokens are numbered like text.
What the images add:
- every image is resized to the tower's square (896 pixels in the published models; no pan-and-scan crops),
  encoded by SigLIP, average-pooled to `mm_tokens_per_image` (256) tokens, RMS-normed and projected to the LM
  width (`Gemma3Tower`, transformers' own modules); the pooled embeddings replace the placeholders unscaled;
- an image's tokens attend to each other in both directions (`bidirectional_images`): the engine's attention
  applies it in every backend and never splits an image between prefill chunks (engine/core/attention.py);
- the chat template writes `<start_of_image>` per image, which the HF processor turns into
  "\\n\\n<start_of_image>" + 256 x `<image_soft_token>` + "<end_of_image>\\n\\n" (`image_text`).

Checkpoints: transformers 5 keeps `model.language_model.*`, `model.vision_tower.*`,
`model.multi_modal_projector.*`; the published ones `language_model.model.*`, `vision_tower.*`,
`multi_modal_projector.*`. Both load. Turns end with `<end_of_turn>`.
"""

import copy
import dataclasses
from types import SimpleNamespace

import torch
from torch import nn

from models.families import gemma3
from models.family import FamilySpec
from models.vision_language.modeling import VisionLanguageAdapter
from models.vision_language.processing import FamilyInputs
from models.weights import WeightNames

__all__ = ["FAMILY", "Gemma3Tower"]

INPUTS = FamilyInputs(
    image_processor_class="Gemma3ImageProcessorPil", image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5),
    default_min_pixels=896 * 896, default_max_pixels=896 * 896, rule="fixed",
    start_token="<start_of_image>", end_token="<end_of_image>", stop_tokens=("<end_of_turn>", "<eos>"),
    markers=(("image_token_index", "<image_soft_token>"), ("boi_token_index", "<start_of_image>"),
             ("eoi_token_index", "<end_of_image>")),
    image_text=("<start_of_image>", "\n\n<start_of_image><image_soft_token><end_of_image>\n\n"),
)
WEIGHTS = WeightNames(
    norms=gemma3.WEIGHTS.norms,
    # the tower's two parts under their module names, from either naming (SigLIP's own `vision_model.` level too)
    prefixes=(("model.language_model.", "text"), ("language_model.model.", "text"), ("lm_head.", "lm_head"),
              ("language_model.lm_head.", "lm_head"),
              *((f"{root}{name}", f"visual:{part}") for root in ("model.", "")
                for name, part in (("vision_tower.vision_model.", "vision_tower."), ("vision_tower.", "vision_tower."),
                                   ("multi_modal_projector.", "multi_modal_projector.")))),
    save_prefix="model.language_model.", tower_save_prefix="model.",
)


class Gemma3Tower(nn.Module):
    """SigLIP over each image, then Gemma-3's projector (pool, RMSNorm, projection), as transformers'
    `Gemma3Model.get_image_features`; called as the engine calls every tower."""

    def __init__(self, config) -> None:
        from transformers import SiglipVisionModel
        from transformers.models.gemma3.modeling_gemma3 import Gemma3MultiModalProjector

        super().__init__()
        self.vision_tower = SiglipVisionModel._from_config(copy.deepcopy(config.vision_config),
                                                           attn_implementation="sdpa")
        self.multi_modal_projector = Gemma3MultiModalProjector(config)

    def init_buffers(self) -> None:
        """SigLIP's position ids (a non-persistent buffer), after the module was materialised with `to_empty`."""
        embeddings = self.vision_tower.embeddings
        device = embeddings.patch_embedding.weight.device
        embeddings.position_ids = torch.arange(embeddings.num_positions, device=device).expand((1, -1))

    def forward(self, pixel_values: torch.Tensor, grid_thw=None) -> SimpleNamespace:
        """pixel_values (images, 3, side, side) -> `pooler_output` (images x mm_tokens_per_image, LM hidden)."""
        hidden = self.vision_tower(pixel_values=pixel_values).last_hidden_state
        return SimpleNamespace(pooler_output=self.multi_modal_projector(hidden).flatten(0, 1))


def decoder(config):
    """The text family's switches, without final logit soft-capping: transformers' Gemma3ForConditionalGeneration
    does not apply it (its Gemma3ForCausalLM does; the published configs set it to null)."""
    return dataclasses.replace(gemma3.decoder(config.text_config), logit_softcap=None)


def _tower():
    from transformers import SiglipVisionModel

    return SiglipVisionModel


FAMILY = FamilySpec(
    name="gemma3-vl", model_types=("gemma3",), config_class="Gemma3Config",
    reference_class="Gemma3ForConditionalGeneration", adapter=VisionLanguageAdapter, decoder=decoder, inputs=INPUTS,
    weights=WEIGHTS, vision_tower=_tower, build_tower=Gemma3Tower, bidirectional_images=True,
    # the text family's tiny switches (an 8-token window, two RoPE tables, soft-capped logits); a 28-pixel SigLIP of
    # 7-pixel patches pooled to 4 tokens per image
    tiny=dict(text_config=dict(gemma3.FAMILY.tiny), config=dict(mm_tokens_per_image=4),
              vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 image_size=28, patch_size=7)),
)
