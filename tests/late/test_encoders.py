"""Encoders: MiniLM token vectors (real weights) and tiny random ColQwen2.5 / ColPali checkpoints."""

import pytest
import torch
from PIL import Image

from kernels.maxsim import maxsim
from tools.errors import DossierError
from tools.late import is_key_word, key_token_mask
from tools.late.vision import ColVisionEncoder


def test_key_words_are_content_words():
    words = "What was 3M's FY2018 capital expenditure in USD millions ?".split()
    assert [w for w in words if is_key_word(w)] == ["3M's", "FY2018", "capital", "expenditure", "USD", "millions"]
    assert key_token_mask(["what", "is", "it"]) == [True, True, True]  # nothing key: fall back to all
    assert key_token_mask([None, "revenue", None]) == [False, True, False]


def test_minilm_vectors_rank_the_relevant_page_first(minilm):
    query = minilm.encode_queries(["What were 3M's capital expenditures in 2018?"])[0]
    assert query.vectors.shape[1] == 384 and torch.allclose(query.vectors.norm(dim=1), torch.ones(len(query.vectors)))
    keys = [t for t, k in zip(query.tokens, query.key_mask.tolist()) if k]
    assert "capital" in keys and "what" not in keys and "were" not in keys
    pages = minilm.encode_pages([
        "The museum opens at nine; tickets for children are free on Sundays.",
        "Purchases of property, plant and equipment (capital expenditures) were $1,577 million in 2018.",
        "",
    ])
    assert pages[2].shape == (0, 384)
    vectors = torch.cat(pages)
    offsets = torch.tensor([0, len(pages[0]), len(pages[0]) + len(pages[1]), len(vectors)])
    scores = maxsim(query.vectors, vectors, offsets)
    assert scores[1] > scores[0] and scores[2] == 0


def test_minilm_long_pages_are_windowed_and_punctuation_dropped(minilm):
    text = "Revenue grew, again. " * 150  # ~600 tokens: three windows
    (vectors,) = minilm.encode_pages([text])
    assert vectors.shape == (450, 384)  # "revenue grew again" x 150; "," and "." dropped
    # the first window (254 word pieces: 50 sentences + "revenue grew , again") is encoded on its own
    (first_window,) = minilm.encode_pages(["Revenue grew, again. " * 50 + "Revenue grew, again"])
    assert first_window.shape == (153, 384)
    assert torch.allclose(vectors[:153], first_window, atol=1e-5)
    assert not torch.allclose(vectors[153:156], first_window[:3], atol=1e-3)  # the next window has its own context


@pytest.mark.parametrize("family", ["colqwen", "colpali"])
def test_vision_encoder_matches_the_model_and_strips_padding(family, tiny_colqwen, tiny_colpali):
    folder = tiny_colqwen if family == "colqwen" else tiny_colpali
    encoder = ColVisionEncoder.from_directory(folder)
    images = [Image.new("RGB", (100, 80), (200, 30, 30)), Image.new("RGB", (60, 120), (10, 90, 30))]
    pages = encoder.encode_pages(images)
    batch = encoder.processor.process_images(images)
    inputs = {k: v for k, v in batch.items() if k in encoder._inputs}
    with torch.no_grad():
        direct = encoder.model(**inputs).embeddings
    for i, page in enumerate(pages):
        mask = batch["attention_mask"][i].bool()
        assert page.shape == (int(mask.sum()), encoder.dim)
        assert torch.allclose(page, direct[i][mask], atol=1e-5)
        assert torch.allclose(page.norm(dim=1), torch.ones(len(page)), atol=1e-4)
    query = encoder.encode_queries(["What was the revenue of 3M in 2018?"])[0]
    keys = "".join(t for t, k in zip(query.tokens, query.key_mask.tolist()) if k)
    assert "revenue" in keys.replace("Ġ", "").replace("▁", "") and "Query" not in keys and "Question" not in keys
    assert not query.key_mask.all()  # prefix and augmentation tokens are not key


def test_vision_encoder_rejects_other_checkpoints(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(DossierError, match="colqwen2, colpali"):
        ColVisionEncoder.from_directory(tmp_path)
