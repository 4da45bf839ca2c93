"""Tiny random ColQwen2.5 / ColPali checkpoints built from a config (with tokenizers trained here), and MiniLM."""

from pathlib import Path

import pytest

TEXT = ["What was the revenue of 3M in 2018? Query: Question: describe the image. capital expenditure cash"] * 10


def _bpe_tokenizer(specials: list[str], byte_level: bool, **special_kwargs):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None if byte_level else "<unk>"))
    if byte_level:  # Qwen-style byte-level BPE
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:  # Gemma-style SentencePiece pieces
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=specials)
    tok.train_from_iterator(TEXT, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **special_kwargs)


def build_tiny_colqwen25(folder: Path) -> Path:
    """A 2-layer ColQwen2 retriever over a Qwen2.5-VL backbone, saved with its processor."""
    from transformers import ColQwen2Config, ColQwen2ForRetrieval, ColQwen2Processor, Qwen2_5_VLConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>", "<|pad|>"]
    tokenizer = _bpe_tokenizer(specials, True, eos_token="<|endoftext|>", pad_token="<|pad|>")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    vlm = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[0],
                           window_size=56),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    model = ColQwen2ForRetrieval(ColQwen2Config(vlm_config=vlm, embedding_dim=16))
    processor = ColQwen2Processor(image_processor=Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112),
                                  tokenizer=tokenizer)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def build_tiny_colpali(folder: Path) -> Path:
    """A 2-layer ColPali retriever over a PaliGemma backbone, saved with its processor."""
    from transformers import ColPaliConfig, ColPaliForRetrieval, ColPaliProcessor, PaliGemmaConfig, SiglipImageProcessor

    tokenizer = _bpe_tokenizer(["<pad>", "<eos>", "<bos>", "<unk>"], False, bos_token="<bos>", eos_token="<eos>",
                               pad_token="<pad>", unk_token="<unk>")
    processor = ColPaliProcessor(image_processor=SiglipImageProcessor(size={"height": 28, "width": 28},
                                                                      image_seq_length=4), tokenizer=tokenizer)
    vocab = len(processor.tokenizer)
    vlm = PaliGemmaConfig(
        text_config=dict(model_type="gemma", vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=28, patch_size=14, projection_dim=32),
        image_token_index=processor.image_token_id, projection_dim=32, vocab_size=vocab)
    model = ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm, embedding_dim=16))
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_colqwen(tmp_path_factory) -> Path:
    return build_tiny_colqwen25(tmp_path_factory.mktemp("colqwen25"))


@pytest.fixture(scope="session")
def tiny_colpali(tmp_path_factory) -> Path:
    return build_tiny_colpali(tmp_path_factory.mktemp("colpali"))


@pytest.fixture(scope="session")
def minilm():
    from tools.late.text import MiniLMTextEncoder

    return MiniLMTextEncoder()
