"""Qwen3 dense text models: Qwen2's decoder without biases, with RMSNorm over each head of q and k before RoPE.

transformers' Qwen3ForCausalLM is the reference. Its `head_dim` is set explicitly (128 in
the published models, not hidden_size / heads); sliding windows, when a config turns them
on (`use_sliding_window`), apply to the layers `layer_types` marks.
"""

from models.decoder import text_decoder
from models.decoder_model import DecoderModel
from models.family import FamilySpec
from models.text_inputs import TextInputs
from models.weights import TEXT_WEIGHTS

__all__ = ["FAMILY"]


def decoder(config):
    bias = bool(getattr(config, "attention_bias", False))
    return text_decoder(config, qkv_bias=bias, o_bias=bias, qk_norm=True)


FAMILY = FamilySpec(
    name="qwen3", model_types=("qwen3",), config_class="Qwen3Config", reference_class="Qwen3ForCausalLM",
    adapter=DecoderModel, decoder=decoder, inputs=TextInputs(), weights=TEXT_WEIGHTS,
    shapes={
        # Qwen3-0.6B's shape, for throughput figures
        "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                           num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                           rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True),
    },
    tiny=dict(head_dim=16, tie_word_embeddings=True),
)
