"""Helpers for the random-weight shapes of vision-language families (no tokenizer: token ids only)."""

from models.vision_language.processing import FamilyInputs

__all__ = ["TINY_TEXT", "marker_ids"]

# The LM of every `*-vl-tiny` shape (smoke tests): 2 layers of width 64; a large initializer range
# keeps greedy choices far from ties.
TINY_TEXT = dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=8192, initializer_range=0.25)


def marker_ids(inputs: FamilyInputs, first: int = 4000) -> dict[str, int]:
    """Config token ids of the family's image/video markers, numbered from `first` (inside a tiny vocabulary)."""
    return {key: first + i for i, (key, _) in enumerate(inputs.markers)}
