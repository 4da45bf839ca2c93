"""A 2-layer random Llama with the test tokenizer (SmolLM2's ChatML template), saved as an HF folder."""

import pytest

from tests.engine.conftest import build_model, build_tokenizer


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """(model directory, HF model): the same random model the engine tests use."""
    folder = tmp_path_factory.mktemp("tiny-llama-train")
    tokenizer = build_tokenizer()
    model = build_model("llama")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model
