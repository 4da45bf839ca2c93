"""Published checkpoints at their real sizes: every tensor name maps onto our model, nothing is missing or unused,
and every shape equals transformers' (issue 49).

For each folder of tests/fixtures/checkpoints (a published `config.json` and the tensor names of its
`model.safetensors.index.json`, names only): our adapter and the transformers reference are built on the `meta`
device from the real config; the published names go through the loader's prefix table
(`models/weights.split_checkpoint`) and must cover exactly what the loader reads for the LM, the tower's
state dict and the output head; then each of our tensors, under transformers 5 names, has the reference's shape.
"""

import json
from pathlib import Path

import pytest
import torch

from models.registry import family_for
from models.weights import _sources, hf_state_dict, split_checkpoint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
CHECKPOINTS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())


def build(name: str):
    from transformers import AutoConfig

    folder = FIXTURES / name
    config = AutoConfig.from_pretrained(folder)
    family = family_for(json.loads((folder / "config.json").read_text())["model_type"])
    with torch.device("meta"):
        ours = family.adapter(config, family, None, None, name)
        reference = family.reference()(config)
    names = (folder / "weight_names.txt").read_text().split()
    return family, ours, reference, names


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_every_published_name_maps_onto_our_model(name):
    family, ours, _, names = build(name)
    prefixes = [prefix for prefix, _ in family.weights.prefixes]
    unmatched = [n for n in names if not any(n.startswith(p) for p in prefixes)]
    assert not unmatched, f"{name}: {len(unmatched)} names match no prefix of {family.name}, e.g. {unmatched[:3]}"
    visual, text, head = split_checkpoint(family.weights, dict.fromkeys(names, True))
    read = {n for _, sources in _sources(ours) for n in sources}
    missing, unused = sorted(read - set(text)), sorted(set(text) - read)
    assert not missing, f"{name}: the loader reads {len(missing)} LM tensors the checkpoint lacks, e.g. {missing[:3]}"
    assert not unused, f"{name}: {len(unused)} LM tensors of the checkpoint would be ignored, e.g. {unused[:3]}"
    if ours.lm_head is not None:
        assert head is not None, f"{name}: untied output head but no lm_head tensor"
    if family.is_vision_language:
        tower = set(ours.visual.state_dict())
        assert set(visual) == tower, (f"{name}: tower tensors missing {sorted(tower - set(visual))[:3]}, "
                                      f"unused {sorted(set(visual) - tower)[:3]}")
    assert len(names) >= 10 * ours.shape.num_layers  # a whole model's names, not a stub


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_every_tensor_has_the_reference_shape_at_the_real_size(name):
    _, ours, reference, _ = build(name)
    theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    shapes = {k: tuple(v.shape) for k, v in hf_state_dict(ours).items()}
    wrong = {k: (s, theirs.get(k)) for k, s in shapes.items() if theirs.get(k) != s}
    assert not wrong, f"{name}: {len(wrong)} tensors differ from transformers' (ours, theirs): {list(wrong.items())[:3]}"
    assert set(theirs) - set(shapes) <= {"lm_head.weight"}, sorted(set(theirs) - set(shapes))[:5]


def _gemma4_text_config(shapes: dict[str, tuple[int, ...]]):
    """A Gemma4TextConfig with the numbers the published tensors' shapes fix (no published config.json could be
    found offline): width, vocabularies, layers, each kind's heads and head size (q_norm's width tells a global
    layer, 512, from a local one), the MLP width and which layers have it doubled (the KV-sharing ones, a suffix),
    whether global layers lack v_proj (k_eq_v), the per-layer input width. What no shape shows (window, RoPE bases,
    epsilon) keeps transformers' defaults."""
    from transformers import Gemma4TextConfig

    layer = "layers.{}.{}"
    count = 1 + max(int(name.split(".")[1]) for name in shapes if name.startswith("layers."))
    head = [shapes[layer.format(i, "self_attn.q_norm.weight")][0] for i in range(count)]
    kinds = ["full_attention" if h == max(head) else "sliding_attention" for h in head]
    local, glob = kinds.index("sliding_attention"), kinds.index("full_attention")
    mlp = [shapes[layer.format(i, "mlp.gate_proj.weight")][0] for i in range(count)]
    shared = [i for i in range(count) if mlp[i] == 2 * min(mlp)]
    assert shared == list(range(count - len(shared), count)), "the double-wide (KV-sharing) layers are a suffix"
    k_eq_v = layer.format(glob, "self_attn.v_proj.weight") not in shapes
    vocab, hidden = shapes["embed_tokens.weight"]
    return Gemma4TextConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=min(mlp), num_hidden_layers=count,
        num_attention_heads=shapes[layer.format(local, "self_attn.q_proj.weight")][0] // head[local],
        num_key_value_heads=shapes[layer.format(local, "self_attn.k_proj.weight")][0] // head[local],
        head_dim=head[local], global_head_dim=head[glob], attention_k_eq_v=k_eq_v,
        num_global_key_value_heads=shapes[layer.format(glob, "self_attn.k_proj.weight")][0] // head[glob],
        layer_types=kinds, num_kv_shared_layers=len(shared), use_double_wide_mlp=bool(shared),
        hidden_size_per_layer_input=shapes[layer.format(0, "per_layer_input_gate.weight")][0],
        vocab_size_per_layer_input=shapes["embed_tokens_per_layer.weight"][0], tie_word_embeddings=True)


def test_the_published_gemma_4_e2b_language_model_maps_onto_ours():
    """google/gemma-4-E2B-it's single-file checkpoint (all 2,011 tensors with shapes; fixtures README): its LM under
    model.language_model.* loads into the gemma4 text family with nothing missing; the only tensors left unread are
    the ones transformers ignores too (k/v projections and k norms the KV-sharing layers store but never use), the
    towers are skipped, and every tensor we read has the published shape and transformers' at that config."""
    rows = [line.split("\t") for line in (FIXTURES / "gemma-4-e2b-it" / "weight_shapes.tsv").read_text().splitlines()[1:]]
    assert len(rows) == 2011
    prefix = "model.language_model."
    published = {name: tuple(int(d) for d in shape.split("×")) if shape else () for name, shape, _ in rows}
    lm = {name[len(prefix):]: shape for name, shape in published.items() if name.startswith(prefix)}
    config = _gemma4_text_config(lm)
    assert (config.num_hidden_layers, config.num_kv_shared_layers, config.hidden_size) == (35, 20, 1536)
    family = family_for("gemma4_text")
    with torch.device("meta"):
        ours = family.adapter(config, family, None, None, "gemma-4-E2B-it")
        reference = family.reference()(config)
    visual, text, head = split_checkpoint(family.weights, dict.fromkeys(published, True))
    assert not visual and head is None and set(text) == set(lm), "towers skipped, the LM read, the head tied"
    read = {n for _, sources in _sources(ours) for n in sources}
    missing, unused = sorted(read - set(text)), set(text) - read
    assert not missing, f"the loader reads {len(missing)} tensors the checkpoint lacks, e.g. {missing[:3]}"
    ignored = tuple(f"{name}." for name in reference.model._keys_to_ignore_on_load_unexpected)  # module prefixes
    assert all(name.startswith(ignored) for name in unused), sorted(n for n in unused if not n.startswith(ignored))[:3]
    assert len(unused) == 20 * 3  # k_proj, v_proj, k_norm of each KV-sharing layer
    theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    for name, tensor in hf_state_dict(ours).items():
        rest = name.removeprefix("model.")
        assert tuple(tensor.shape) == lm[rest] == theirs[name], (name, tuple(tensor.shape), lm[rest], theirs.get(name))
