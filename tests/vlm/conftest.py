"""Tiny random vision-language models of the real architectures, saved as local model folders.

Each folder holds the HF config and weights, a byte-level BPE tokenizer trained in the
test with the family's special tokens and chat template, and the image processor's
`preprocessor_config.json` (small pixel bounds), so the loader takes the AutoProcessor
path a real model folder takes. Weights are drawn with a large standard deviation (the
vision tower's too) so images change the logits and greedy choices are far from ties;
the output rows of the image/video tokens are zeroed so greedy decoding never emits a
placeholder, as real models do not.
"""

import os

import numpy as np
import pytest
import torch

from models.registry import families, family_for

os.environ.setdefault("HF_HUB_OFFLINE", "1")

QWEN_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GLM_TEMPLATE = (
    "[gMASK]<sop>{% for msg in messages %}{% if msg.role == 'system' %}<|system|>\n{{ msg.content }}"
    "{% elif msg.role == 'user' %}<|user|>\n{% if msg.content is string %}{{ msg.content }}{% else %}"
    "{% for item in msg.content %}{% if item.type == 'image' or 'image' in item %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif item.type == 'text' %}{{ item.text }}{% endif %}{% endfor %}{% endif %}"
    "{% elif msg.role == 'assistant' %}<|assistant|>\n{{ msg.content }}"
    "{% elif msg.role == 'observation' %}<|observation|>\n{{ msg.content }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
GEMMA_TEMPLATE = (  # Gemma-3's template: turns of <start_of_turn>role ... <end_of_turn>, <start_of_image> per image
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}<start_of_turn>{{ role }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}{% if item['type'] == 'image' %}<start_of_image>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
GEMMA4_TEMPLATE = (  # Gemma 4's turn markup: <|turn>role ... <turn|>, <|image|> per image (its processor expands it)
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}<|turn>{{ role }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}{% if item['type'] == 'image' %}<|image|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}<turn|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)
GEMMA4_SPECIAL = ["<eos>", "<bos>", "<pad>", "<|turn>", "<turn|>", "<|image>", "<image|>", "<|image|>", "<|video|>",
                  "<|audio|>", "<|audio>", "<audio|>"]
GEMMA_SPECIAL = ["<eos>", "<bos>", "<pad>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                 "<image_soft_token>"]
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]
GLM_SPECIAL = ["<|endoftext|>", "[gMASK]", "<sop>", "<pad>", "<|begin_of_image|>", "<|end_of_image|>", "<|image|>",
               "<|video|>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|begin_of_video|>",
               "<|end_of_video|>"]
CORPUS = [
    "File: annual-report, Page: 3. Revenue grew to $1,577 million in 2019 from $1,402 million.",
    "Search results for: operating income 2019. The table on page 12 lists each segment.",
    '{"tool": "search", "query": "revenue 2019"} {"tool": "answer", "answer": ["$1,577 million"]}',
    "You are a document agent. Look at the page images and answer the question.",
    "Question: what was the total revenue? Describe the chart and the table.",
] * 4
VOCAB = 448  # the model's rows (the tokenizer has 400)
CHATML = (QWEN_TEMPLATE, QWEN_SPECIAL, "<|im_end|>")
# The chat markup of each VL family's real template (by family name) when it is not ChatML.
CHAT_FORMATS = {"glm4v": (GLM_TEMPLATE, GLM_SPECIAL, "<|user|>"), "glm46v": (GLM_TEMPLATE, GLM_SPECIAL, "<|user|>"),
                "gemma3-vl": (GEMMA_TEMPLATE, GEMMA_SPECIAL, "<end_of_turn>"),
                "gemma4-vl": (GEMMA4_TEMPLATE, GEMMA4_SPECIAL, "<turn|>")}
FAMILIES = tuple(family.model_types[0] for family in families() if family.is_vision_language)


def build_tokenizer(family: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    template, special, eos = CHAT_FORMATS.get(family_for(family).name, CHATML)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(CORPUS, trainer)
    extra = {}
    if "<image_soft_token>" in special:  # what Gemma-3's HF processor reads off its tokenizer
        extra = dict(bos_token="<bos>", extra_special_tokens={"boi_token": "<start_of_image>",
                                                              "eoi_token": "<end_of_image>",
                                                              "image_token": "<image_soft_token>"})
    if "<|image|>" in special:  # what Gemma 4's HF processor reads off its tokenizer
        extra = dict(bos_token="<bos>", extra_special_tokens={
            "boi_token": "<|image>", "eoi_token": "<image|>", "image_token": "<|image|>", "audio_token": "<|audio|>",
            "boa_token": "<|audio>", "eoa_token": "<audio|>"})
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos, pad_token="<pad>",
                                        unk_token="<|endoftext|>" if "<|endoftext|>" in special else "<eos>", **extra)
    tokenizer.chat_template = template
    return tokenizer


def build_config(family: str, tokenizer, text_extra: dict | None = None):
    """The family's tiny config (FamilySpec.tiny) with the test tokenizer's vocabulary and marker ids; `text_extra`
    changes the text model's (e.g. Gemma 4's mixture of experts)."""
    spec = family_for(family)
    vocab = tokenizer.get_vocab()
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6)
    text.update(spec.tiny["text_config"])  # a family's own sizes win (Qwen3.5: 4 layers, 3 of them linear)
    text.update(text_extra or {})
    markers = {key: vocab[token] for key, token in spec.inputs.markers}
    return spec.config(text_config=text, vision_config=dict(spec.tiny["vision_config"]), **markers,
                       **spec.tiny.get("config", {}))


@torch.no_grad()
def build_model(family: str, tokenizer, seed: int = 0, std: float = 0.25, text_extra: dict | None = None):
    spec = family_for(family)
    config = build_config(family, tokenizer, text_extra)
    torch.manual_seed(seed)
    model = spec.reference()(config).eval()
    generator = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        if "norm" in name or "ln_q" in name:
            param.fill_(1.0 if name.endswith("weight") else 0.0)
        elif name.endswith("bias"):
            param.normal_(0.0, 0.02, generator=generator)
        else:
            param.copy_(torch.randn(param.shape, generator=generator) * std)
    vocab = tokenizer.get_vocab()
    banned = [vocab[token] for _, token in spec.inputs.markers if token in vocab]
    model.lm_head.weight[banned] = 0.0  # never generate a placeholder (the HF reference could not take it back)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def image_processor(family: str):
    """The family's image processor with the tiny bounds of FamilySpec.tiny["pixels"] (a few tokens per image)."""
    import transformers

    spec = family_for(family)
    vision = spec.config(vision_config=dict(spec.tiny["vision_config"])).vision_config
    cls = getattr(transformers, spec.inputs.image_processor_class)
    if spec.inputs.rule == "fixed":  # Gemma-3: every image becomes the tower's square
        return cls(size={"height": vision.image_size, "width": vision.image_size},
                   image_mean=list(spec.inputs.image_mean), image_std=list(spec.inputs.image_std))
    if spec.inputs.rule == "gemma4":  # a budget of tokens per image (70 is its processor's smallest)
        return cls(patch_size=vision.patch_size, pooling_kernel_size=vision.pooling_kernel_size, max_soft_tokens=70)
    low, high = spec.tiny["pixels"]
    return cls(size={"shortest_edge": low, "longest_edge": high}, patch_size=vision.patch_size,
               image_mean=list(spec.inputs.image_mean), image_std=list(spec.inputs.image_std))


def save_model(folder, family: str, text_extra: dict | None = None):
    tokenizer = build_tokenizer(family)
    model = build_model(family, tokenizer, text_extra=text_extra)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    image_processor(family).save_pretrained(folder)
    if family_for(family).inputs.rule == "fixed":  # Gemma-3's processor: its placeholder count is the model's
        from transformers import Gemma3Processor

        Gemma3Processor(image_processor(family), tokenizer, chat_template=tokenizer.chat_template,
                        image_seq_length=model.config.mm_tokens_per_image).save_pretrained(folder)
    if family_for(family).inputs.rule == "gemma4":  # Gemma 4's processor (it wants its audio and video parts too)
        from transformers import Gemma4AudioFeatureExtractor, Gemma4Processor, Gemma4VideoProcessor

        Gemma4Processor(Gemma4AudioFeatureExtractor(), image_processor(family), tokenizer, Gemma4VideoProcessor(),
                        chat_template=tokenizer.chat_template, image_seq_length=70).save_pretrained(folder)
    return model, tokenizer


def make_image(width: int, height: int, seed: int):
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.fixture(scope="session", params=FAMILIES)
def vl_model(request, tmp_path_factory):
    """(family, folder, HF reference model, tokenizer) of a tiny random model of each family."""
    family = request.param
    folder = tmp_path_factory.mktemp(f"tiny-{family}")
    model, tokenizer = save_model(folder, family)
    return family, folder, model, tokenizer
