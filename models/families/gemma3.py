"""Gemma-3 text models (Gemma3ForCausalLM: gemma-3-1b, or the language model of the larger ones).

What sets Gemma-3 apart, all as switches of the shared decoder:
- sliding-window layers interleaved with global ones (`layer_types`, five local to one
  global in the published models): local layers attend to the last `sliding_window`
  tokens through the engine's per-layer attention window, global layers to everything;
- two RoPE tables: local layers use base 10,000, global layers 1,000,000 (with linear
  scaling in the 4B+ models), one `rope_parameters` entry per layer type;
- its own RMSNorm, scaling by (1 + weight), on the layer input, the attention output,
  before and after the MLP ("pre/post feed-forward norms"), and over each head of q and k;
- embeddings multiplied by sqrt(hidden_size), in the model dtype;
- a softmax scale of query_pre_attn_scalar ** -0.5 instead of head_dim ** -0.5;
- GELU (tanh approximation) in the gated MLP;
- final logit soft-capping (cap * tanh(logits / cap)) when the config sets it (Gemma-2 did;
  the published Gemma-3 configs set None). Soft-capping of attention scores is refused:
  transformers 5.24 applies it only in its eager attention, and no Gemma-3 uses it.

Chat turns end with `<end_of_turn>`.
"""

from models.decoder import text_decoder
from models.decoder_model import DecoderModel
from models.family import FamilySpec
from models.rotary import RopeSpec
from models.text_inputs import TextInputs
from models.weights import WeightNames
from tools.errors import DossierError

__all__ = ["FAMILY"]

WEIGHTS = WeightNames(norms=(("attn_norm", "input_layernorm"), ("attn_out_norm", "post_attention_layernorm"),
                             ("mlp_norm", "pre_feedforward_layernorm"), ("mlp_out_norm", "post_feedforward_layernorm")))


def decoder(config):
    if config.attn_logit_softcapping is not None:
        raise DossierError(f"Gemma-3 config sets attn_logit_softcapping={config.attn_logit_softcapping}: soft-capped "
                           "attention scores are not supported (published Gemma-3 configs set it to null)")
    if config.use_bidirectional_attention:
        raise DossierError("a Gemma-3 config with use_bidirectional_attention=true is an encoder, not a causal LM")
    head_dim = config.head_dim
    bias = bool(config.attention_bias)
    return text_decoder(
        config, qkv_bias=bias, o_bias=bias, qk_norm=True, out_norms=True, norm_offset=1.0,
        activation=config.hidden_activation, attention_scale=config.query_pre_attn_scalar**-0.5,
        embed_scale=config.hidden_size**0.5, logit_softcap=config.final_logit_softcapping,
        rope=RopeSpec(head_dim, head_dim, variants=tuple(sorted(set(config.layer_types)))),
        layer_variants=tuple(config.layer_types),
    )


FAMILY = FamilySpec(
    name="gemma3", model_types=("gemma3_text",), config_class="Gemma3TextConfig", reference_class="Gemma3ForCausalLM",
    adapter=DecoderModel, decoder=decoder, inputs=TextInputs(stop_tokens=("<end_of_turn>", "<eos>")), weights=WEIGHTS,
    shapes={
        # Gemma-3-1B's shape (google/gemma-3-1b-it), for throughput figures
        "gemma3-1b": dict(vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                          num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                          sliding_window=512, max_position_embeddings=32768, rope_theta=1000000.0,
                          rope_local_base_freq=10000.0, sliding_window_pattern=6),
    },
    # A window of 8 tokens under prompts of up to 41, a local and a global layer with different RoPE tables (the
    # global one linearly scaled), a softmax scale that is not head_dim's, and soft-capped logits.
    tiny=dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
              final_logit_softcapping=3.0, tie_word_embeddings=True,
              rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                               "full_attention": dict(rope_type="linear", factor=2.0, rope_theta=1000000.0)}),
)
