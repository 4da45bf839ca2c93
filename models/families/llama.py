"""Llama 2/3 and SmolLM2 (the default model): the plain pre-norm decoder, RoPE (llama3 scaling too)."""

from models.decoder import text_decoder
from models.decoder_model import DecoderModel
from models.family import FamilySpec
from models.text_inputs import TextInputs
from models.weights import TEXT_WEIGHTS

__all__ = ["FAMILY"]


def decoder(config):
    bias = bool(getattr(config, "attention_bias", False))
    return text_decoder(config, qkv_bias=bias, o_bias=bias, mlp_bias=bool(getattr(config, "mlp_bias", False)))


FAMILY = FamilySpec(
    name="llama", model_types=("llama",), config_class="LlamaConfig", reference_class="LlamaForCausalLM",
    adapter=DecoderModel, decoder=decoder, inputs=TextInputs(), weights=TEXT_WEIGHTS,
    shapes={
        # A large initializer range keeps greedy choices far from ties, so parity checks on it are meaningful.
        "llama-tiny": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
                           num_key_value_heads=2, head_dim=32, vocab_size=4096, max_position_embeddings=8192,
                           initializer_range=0.25),
        # Llama 3.2 1B and 3B shapes, for GPU throughput figures.
        "llama-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
                         rope_theta=500000.0, tie_word_embeddings=True),
        "llama-3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
                         rope_theta=500000.0, tie_word_embeddings=True),
    },
    tiny=dict(tie_word_embeddings=False, rope_theta=10000.0),
)
