"""Qwen2 / Qwen2.5 text models (and Qwen2.5-Coder): Llama's decoder with biases on q, k and v."""

from models.decoder import text_decoder
from models.decoder_model import DecoderModel
from models.family import FamilySpec
from models.text_inputs import TextInputs
from models.weights import TEXT_WEIGHTS

__all__ = ["FAMILY"]


def decoder(config):
    return text_decoder(config, qkv_bias=True)


FAMILY = FamilySpec(
    name="qwen2", model_types=("qwen2",), config_class="Qwen2Config", reference_class="Qwen2ForCausalLM",
    adapter=DecoderModel, decoder=decoder, inputs=TextInputs(), weights=TEXT_WEIGHTS,
    tiny=dict(tie_word_embeddings=True),
)
