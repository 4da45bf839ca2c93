"""Inputs of the VL families: qwen-vl-utils sizing, token cost before encoding, rendering equal to HF's processor."""

import pytest
import torch

from engine import Engine, EngineConfig
from models.chat_template import TemplateChatProcessor
from models.vision import ImageSizing, smart_resize
from tests.vlm.conftest import build_tokenizer, make_image
from tests.vlm.test_parity import engine_for
from tools.errors import DossierError

# (height, width, factor, min_pixels, max_pixels) -> qwen_vl_utils.smart_resize 0.0.14's answer
# (checked against the package on 82,496 random and small sizes: all equal).
QWEN_VL_UTILS = [
    ((1754, 1240, 28, 4 * 28 * 28, 16384 * 28 * 28), (1764, 1232)),  # A4 at 150 dpi, default bounds
    ((1754, 1240, 28, 256 * 28 * 28, 1280 * 28 * 28), (1176, 840)),  # the Qwen2-VL README's bounds
    ((10, 300, 28, 4 * 28 * 28, 16384 * 28 * 28), (28, 308)),  # thin strip: a side is never below one token
    ((1100, 850, 32, 4 * 32 * 32, 16384 * 32 * 32), (1088, 864)),  # Qwen3-VL's 32-pixel tokens
    ((56, 84, 28, 784, 7056), (56, 84)),
]


@pytest.mark.parametrize(("args", "expected"), QWEN_VL_UTILS)
def test_sizing_matches_qwen_vl_utils(args, expected):
    assert smart_resize(*args) == expected


def test_sizing_errors_name_the_image():
    with pytest.raises(DossierError, match="aspect ratio above 200"):
        smart_resize(5000, 10, 28, 784, 7056)
    with pytest.raises(DossierError, match=r"3000x20 .* too thin"):  # qwen-vl-utils returns width 0 here
        smart_resize(20, 3000, 28, 784, 7056)
    with pytest.raises(DossierError, match="min_pixels <= max_pixels"):
        ImageSizing(14, 2, min_pixels=10_000, max_pixels=5_000)


@pytest.mark.parametrize("size", [(56, 84), (120, 45), (300, 200), (31, 29), (84, 84)])
def test_token_cost_is_known_before_encoding_and_equals_the_hf_processor(vl_model, size):
    """image_tokens(image) == placeholders the session appends == what HF's processor makes of the same image."""
    family, folder, _, _ = vl_model
    engine = engine_for(folder)
    vision = engine.processor.vision
    image = make_image(*size, seed=3)
    cost = engine.processor.image_tokens(image)
    assert cost == engine.processor.image_tokens(size)  # from the size alone
    session = engine.open_session()
    session.append_message("user", "Look.", images=[image])
    assert [item.length + 2 for _, item in session.seq.mm_items] == [cost]
    sizing = vision.sizing
    if sizing.fixed:  # Gemma-3: every image is the tower's square, pooled to the config's token count
        hf = vision.image_processor(images=[image], return_tensors="pt")
        side = engine.adapter.config.vision_config.image_size
        assert tuple(hf["pixel_values"].shape) == (1, 3, side, side)
        assert cost - 2 == engine.adapter.config.mm_tokens_per_image
        return
    if sizing.rule == "gemma4":  # scaled to fill its token budget, whatever the bounds
        hf = vision.image_processor(images=[image], return_tensors="pt")
        assert list(hf["num_soft_tokens_per_image"]) == [cost - 2]
        return
    hf = vision.image_processor(images=[image], size={"shortest_edge": sizing.min_pixels, "longest_edge": sizing.max_pixels},
                                return_tensors="pt")
    assert int(hf["image_grid_thw"].prod()) // sizing.merge_size**2 == cost - 2


def test_conversation_tokens_equal_the_hf_processor(vl_model):
    """Per-segment rendering (one message at a time) gives the ids and pixels HF's processor gives the whole chat."""
    from transformers import AutoProcessor

    family, folder, _, tokenizer = vl_model
    engine = engine_for(folder)
    f = engine.processor.vision.sizing.factor  # sides that are multiples of it: neither side resizes
    pages = [make_image(2 * f, 3 * f, 1), make_image(3 * f, 2 * f, 2), make_image(2 * f, 2 * f, 3)]
    session = engine.open_session()
    session.append_message("system", "You are a document agent.")
    session.append_message("user", "Question: what was the revenue? <image>", images=pages[:1])
    session.append_message("assistant", '{"tool": "search", "query": "revenue 2019"}')
    session.append_message("user", ["File: report, Page: 3\n", pages[1], "File: report, Page: 4\n", pages[2]])
    session.append_generation_prompt()
    messages = [
        {"role": "system", "content": "You are a document agent."},
        {"role": "user", "content": [{"type": "text", "text": "Question: what was the revenue? "}, {"type": "image"}]},
        {"role": "assistant", "content": '{"tool": "search", "query": "revenue 2019"}'},
        {"role": "user", "content": [{"type": "text", "text": "File: report, Page: 3\n"}, {"type": "image"},
                                     {"type": "text", "text": "File: report, Page: 4\n"}, {"type": "image"}]},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    processor = AutoProcessor.from_pretrained(folder)
    expected = processor(text=[text], images=pages, return_tensors="pt")
    assert session.token_ids == expected["input_ids"][0].tolist()
    ours, grid = engine.processor.vision.pixel_values([item.data for _, item in session.seq.mm_items])
    if "image_position_ids" in expected:  # Gemma 4 pads every image to its budget; ours to the longest image
        patches = ours.shape[1]
        assert torch.equal(grid, expected["image_position_ids"][:, :patches])
        assert (expected["image_position_ids"][:, patches:] == -1).all()
        expected["pixel_values"] = expected["pixel_values"][:, :patches]
    if "image_grid_thw" in expected:  # (Gemma-3's images are all one square: no grid)
        assert torch.equal(grid, expected["image_grid_thw"])
    assert torch.allclose(ours, expected["pixel_values"], atol=1e-5)


def test_content_forms_render_alike(vl_model):
    family, folder, _, _ = vl_model
    processor = engine_for(folder).processor
    page = make_image(56, 56, 4)
    forms = [
        processor.render_message("user", "<image>Read it.", first=False, images=[page]),
        processor.render_message("user", "Read it.", first=False, images=[page]),  # no mark: images first
        processor.render_message("user", [page, "Read it."], first=False),
        processor.render_message("user", [{"type": "image", "image": page}, {"type": "text", "text": "Read it."}],
                                 first=False),
    ]
    assert all(f.token_ids == forms[0].token_ids for f in forms)
    assert len({f.mm_items[0].content_hash for f in forms}) == 1


def test_bad_image_input_is_a_clear_error(vl_model):
    family, folder, _, tokenizer = vl_model
    processor = engine_for(folder).processor
    page = make_image(56, 56, 4)
    with pytest.raises(DossierError, match="2 <image> marks but 1 images"):
        processor.render_message("user", "<image> and <image>", first=False, images=[page])
    with pytest.raises(DossierError, match="needs a PIL.Image"):
        processor.render_message("user", "look", first=False, images=["page.png"])
    with pytest.raises(DossierError, match="either inside the content parts or as images"):
        processor.render_message("user", [page], first=False, images=[page])
    pad = tokenizer.convert_ids_to_tokens(processor.vision.image_token_id)
    with pytest.raises(DossierError, match="rendered 2 image placeholders for 1 images"):
        processor.render_message("user", f"a literal {pad}", first=False, images=[page])
    session = engine_for(folder).open_session()
    with pytest.raises(DossierError, match="image placeholder tokens but its images fill 0"):
        session.append([processor.vision.image_token_id] * 3)
    text_only = TemplateChatProcessor(build_tokenizer("qwen2_vl"))
    with pytest.raises(DossierError, match="text-only"):
        text_only.render_message("user", "look", first=True, images=[page])


def test_pixel_bounds_come_from_the_engine_config(vl_model):
    family, folder, _, _ = vl_model
    default = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=64))
    capped = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=64, image_max_pixels=56 * 56))
    page = make_image(300, 200, 5)
    if default.processor.vision.sizing.fixed:  # Gemma-3: one size for every image; the bound is ignored (a warning)
        assert capped.processor.image_tokens(page) == default.processor.image_tokens(page)
        assert capped.processor.vision.sizing.max_pixels == default.processor.vision.sizing.max_pixels
        return
    if default.processor.vision.sizing.rule == "gemma4":  # budgets of 70-1120 tokens; the tiny model has the least
        budget = default.processor.vision.sizing.max_pixels
        larger = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=64, image_max_pixels=2 * budget))
        assert capped.processor.vision.sizing.max_pixels == budget  # below the smallest budget: the smallest
        assert larger.processor.image_tokens(page) > default.processor.image_tokens(page)
        assert larger.processor.vision.sizing.max_pixels == 2 * budget
        return
    assert capped.processor.image_tokens(page) < default.processor.image_tokens(page)
    assert capped.processor.vision.sizing.max_pixels == 56 * 56


def test_gemma4_sizing_equals_its_image_processor():
    """Gemma 4's rule (models/vision.gemma4_resize) against transformers' own function on random and thin sizes, at
    the published patch budget (280 tokens of 3 x 3 16-pixel patches) and the tiny test model's."""
    import random

    from transformers.models.gemma4.image_processing_pil_gemma4 import get_aspect_ratio_preserving_size

    from models.vision import gemma4_resize

    rng = random.Random(0)
    sizes = [(rng.randint(1, 4000), rng.randint(1, 4000)) for _ in range(3000)] + [(10, 1500), (1500, 10), (48, 48)]
    checked = 0
    for height, width in sizes:
        if max(height, width) / min(height, width) > 200:
            continue
        for patch, budget in ((16, 280 * 9), (4, 70 * 9)):
            assert gemma4_resize(height, width, patch, budget, 3) == get_aspect_ratio_preserving_size(
                height=height, width=width, patch_size=patch, max_patches=budget, pooling_kernel_size=3), (height, width)
            checked += 1
    assert checked > 5000
