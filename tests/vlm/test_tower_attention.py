"""Issue 46, finding 13: the vision tower attends over every image and window in one variable-length call per layer
(flash-attn on a GPU when installed, else one padded SDPA call), not transformers' loop of one SDPA call per
window after a `lengths.tolist()`; its output equals transformers' own SDPA tower."""

import copy

import pytest
import torch
from transformers import AttentionInterface

import models.vision_language.tower_attention as tower_attention
from models.registry import family_for
from tests.vlm.conftest import build_config, build_tokenizer


def test_every_vision_tower_equals_transformers_sdpa_tower_in_one_call_per_layer(vl_model, monkeypatch):
    family_name = vl_model[0]
    config = build_config(family_name, build_tokenizer(family_name))
    family = family_for(config.model_type)
    if family.build_tower is not None:
        pytest.skip(f"{family.name}'s tower is the family's own build of transformers' modules (SigLIP for Gemma-3, "
                    "Gemma4VisionModel over padded images for Gemma 4) on their SDPA attention: no windows to pack")
    torch.manual_seed(0)
    reference = family.vision_tower()._from_config(config.vision_config, attn_implementation="sdpa").eval()
    ours = family.vision_tower()._from_config(copy.deepcopy(config.vision_config), attn_implementation="sdpa").eval()
    ours.load_state_dict(reference.state_dict())
    ours.config._attn_implementation = tower_attention.register_tower_attention()
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs["cu_seq_lens_q"].numel() - 1)
        return tower_attention.varlen_attention(*args, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, tower_attention.TOWER_ATTENTION, counted)
    vision = config.vision_config
    grid = torch.tensor([[1, 8, 12], [1, 4, 4], [1, 12, 8]])  # three images of different sizes
    pixels = torch.randn(int(grid.prod(-1).sum()), 3 * getattr(vision, "temporal_patch_size", 2) * vision.patch_size**2)
    with torch.no_grad():
        want, got = reference(pixels, grid_thw=grid), ours(pixels, grid_thw=grid)
    want, got = getattr(want, "pooler_output", want), getattr(got, "pooler_output", got)
    layers = len(ours.blocks)
    assert len(calls) == layers and all(windows >= 3 for windows in calls), (family_name, calls)
    diff = (want - got).abs().max().item()
    assert diff <= 1e-5, f"{family_name}: max |ours - transformers| {diff:.3g}"
