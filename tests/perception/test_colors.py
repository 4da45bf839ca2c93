"""Colour sampling of word and cell patches, and colour names."""

import numpy as np
import pytest

from tools.perception.colors import color_name, patch_colors


def _patch(background, ink, ink_share=0.15, blend=True):
    rng = np.random.default_rng(0)
    patch = np.tile(np.array(background, np.uint8), (40, 120, 1))
    mask = rng.random((40, 120)) < ink_share
    patch[mask] = ink
    if blend:  # anti-aliased edges: half-way pixels around the strokes
        edge = np.roll(mask, 1, axis=1) & ~mask
        patch[edge] = ((np.array(background) + np.array(ink)) / 2).astype(np.uint8)
    return patch


@pytest.mark.parametrize("background, ink, text_name, background_name", [
    ((255, 255, 255), (217, 0, 0), "red", "white"),
    ((255, 255, 255), (0, 0, 0), "black", "white"),
    ((255, 237, 51), (0, 0, 0), "black", "yellow"),
    ((204, 229, 255), (0, 0, 160), "blue", "light blue"),
    ((20, 40, 120), (255, 255, 255), "white", "dark blue"),
])
def test_patch_colors_read_text_and_background(background, ink, text_name, background_name):
    text, back = patch_colors(_patch(background, ink))
    assert (color_name(text), color_name(back)) == (text_name, background_name)


def test_blank_patch_has_no_text_colour():
    assert patch_colors(np.full((10, 10, 3), 250, np.uint8)) == (None, "#fafafa")
    assert patch_colors(np.zeros((0, 0, 3), np.uint8)) == (None, None)


@pytest.mark.parametrize("color, name", [
    ("#ffd9d9", "light red"), ("#cce5ff", "light blue"), ("#f5f0e6", "white"), ("#808080", "gray"),
    ("#00a000", "green"), ("#ffa500", "orange"), ("#8b4513", "brown"), ("#800080", "purple"), ("#000000", "black"),
])
def test_color_names(color, name):
    assert color_name(color) == name
