"""Published checkpoints at their real sizes: every tensor name maps onto our model, nothing is missing or unused,
and every shape equals transformers' (issue 49).

For each folder of tests/fixtures/checkpoints with a published `config.json`: our adapter and the transformers
reference are built on the `meta` device from the real config, and each of our tensors, under transformers 5 names,
has the reference's shape. Where the folder also has the tensor names of the checkpoint's
`model.safetensors.index.json` (names only), they go through the loader's prefix table
(`models/weights.split_checkpoint`) and must cover exactly what the loader reads for the LM, the tower's
state dict and the output head, and where it has their shapes (`weight_shapes.tsv`), each tensor we read has the
published shape. (Qwen3.5-9B has a config here but no published names: the fixtures README says why.)
"""

import json
from pathlib import Path

import pytest
import torch

from models.registry import family_for
from models.weights import _sources, hf_state_dict, split_checkpoint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
CONFIGS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
CHECKPOINTS = [name for name in CONFIGS if (FIXTURES / name / "weight_names.txt").is_file()]  # published names too


def build(name: str):
    from transformers import AutoConfig

    folder = FIXTURES / name
    config = AutoConfig.from_pretrained(folder)
    family = family_for(json.loads((folder / "config.json").read_text())["model_type"])
    with torch.device("meta"):
        ours = family.adapter(config, family, None, None, name)
        reference = family.reference()(config)
    names_file = folder / "weight_names.txt"
    names = names_file.read_text().split() if names_file.is_file() else None
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


def test_the_config_only_rows_are_the_ones_the_readme_names():
    assert set(CONFIGS) - set(CHECKPOINTS) == {"qwen3.5-9b"}


@pytest.mark.parametrize("name", CONFIGS)
def test_every_tensor_has_the_reference_shape_at_the_real_size(name):
    _, ours, reference, _ = build(name)
    theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    shapes = {k: tuple(v.shape) for k, v in hf_state_dict(ours).items()}
    wrong = {k: (s, theirs.get(k)) for k, s in shapes.items() if theirs.get(k) != s}
    assert not wrong, f"{name}: {len(wrong)} tensors differ from transformers' (ours, theirs): {list(wrong.items())[:3]}"
    assert set(theirs) - set(shapes) <= {"lm_head.weight"}, sorted(set(theirs) - set(shapes))[:5]
    if (FIXTURES / name / "weight_shapes.tsv").is_file():  # the published shapes too
        published = _shapes(name)
        differ = {k: (s, published[k]) for k, s in shapes.items() if k in published and published[k] != s}
        assert not differ, f"{name}: {len(differ)} tensors differ from the published shapes: {list(differ.items())[:3]}"
        assert sum(k in published for k in shapes) >= 0.9 * len(shapes), "our names are not the published ones"


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


def _gemma4_vision_config(shapes: dict[str, tuple[int, ...]]):
    """The vision tower's numbers the published shapes fix (width, layers, heads, MLP, patch size, position table,
    clipped linears; the pooling kernel, 3, is transformers' default: no shape shows it)."""
    from transformers import Gemma4VisionConfig

    layer = "encoder.layers.0."
    hidden = shapes["patch_embedder.input_proj.weight"][0]
    head_dim = shapes[layer + "self_attn.q_norm.weight"][0]
    return Gemma4VisionConfig(
        hidden_size=hidden, intermediate_size=shapes[layer + "mlp.gate_proj.linear.weight"][0],
        num_hidden_layers=1 + max(int(n.split(".")[2]) for n in shapes if n.startswith("encoder.layers.")),
        num_attention_heads=shapes[layer + "self_attn.q_proj.linear.weight"][0] // head_dim,
        num_key_value_heads=shapes[layer + "self_attn.k_proj.linear.weight"][0] // head_dim, head_dim=head_dim,
        patch_size=int((shapes["patch_embedder.input_proj.weight"][1] // 3) ** 0.5),
        position_embedding_size=shapes["patch_embedder.position_embedding_table"][1],
        use_clipped_linears=layer + "mlp.gate_proj.input_max" in shapes, standardize="std_bias" in shapes)


@pytest.mark.parametrize("model_type", ["gemma4_text", "gemma4"])
def test_the_published_gemma_4_e2b_checkpoint_maps_onto_ours(model_type):
    """google/gemma-4-E2B-it's single-file checkpoint (all 2,011 tensors with shapes; fixtures README), through the
    text family (its LM alone) and the vision family (LM and vision tower): nothing we read is missing; the only LM
    tensors left unread are the ones transformers ignores too (k/v projections and k norms the KV-sharing layers
    store but never use); the audio tower is skipped (and the vision tower by the text family); every tensor we
    read has the published shape and transformers' at that config."""
    rows = [line.split("\t") for line in (FIXTURES / "gemma-4-e2b-it" / "weight_shapes.tsv").read_text().splitlines()[1:]]
    assert len(rows) == 2011
    published = {name: tuple(int(d) for d in shape.split("×")) if shape else () for name, shape, _ in rows}
    lm = {n.removeprefix("model.language_model."): s for n, s in published.items() if n.startswith("model.language_model.")}
    text_config = _gemma4_text_config(lm)
    assert (text_config.num_hidden_layers, text_config.num_kv_shared_layers, text_config.hidden_size) == (35, 20, 1536)
    family = family_for(model_type)
    config = text_config
    if family.is_vision_language:
        from transformers import Gemma4Config

        tower = {n.removeprefix("model.vision_tower."): s for n, s in published.items() if n.startswith("model.vision_tower.")}
        config = Gemma4Config(text_config=text_config.to_dict(), vision_config=_gemma4_vision_config(tower).to_dict())
    with torch.device("meta"):
        ours = family.adapter(config, family, None, None, "gemma-4-E2B-it")
        reference = family.reference()(config)
    visual, text, head = split_checkpoint(family.weights, dict.fromkeys(published, True))
    assert set(text) == set(lm) and head is None, "the LM read, the head tied"
    if family.is_vision_language:
        assert set(visual) == set(ours.visual.state_dict()), sorted(set(visual) ^ set(ours.visual.state_dict()))[:5]
    else:
        assert not visual
    read = {n for _, sources in _sources(ours) for n in sources}
    missing, unused = sorted(read - set(text)), set(text) - read
    assert not missing, f"the loader reads {len(missing)} tensors the checkpoint lacks, e.g. {missing[:3]}"
    lm_reference = reference.model.language_model if family.is_vision_language else reference.model
    ignored = tuple(f"{name}." for name in lm_reference._keys_to_ignore_on_load_unexpected)  # module prefixes
    assert all(name.startswith(ignored) for name in unused), sorted(n for n in unused if not n.startswith(ignored))[:3]
    assert len(unused) == 20 * 3  # k_proj, v_proj, k_norm of each KV-sharing layer
    theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    save = family.weights.save_prefix
    for name, tensor in hf_state_dict(ours).items():
        mine = name.replace(save, "model.language_model.", 1) if name.startswith(save) else name
        assert tuple(tensor.shape) == published[mine] == theirs[name], (name, tuple(tensor.shape), published[mine],
                                                                         theirs.get(name))


def _shapes(folder: str, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """{name without `prefix`: shape} of a fixture's weight_shapes.tsv rows whose name starts with `prefix`."""
    rows = [line.split("\t") for line in (FIXTURES / folder / "weight_shapes.tsv").read_text().splitlines()[1:]]
    return {name[len(prefix):]: tuple(int(d) for d in shape.split("×")) if shape else ()
            for name, shape, _ in rows if name.startswith(prefix)}


def _qwen3_5_config(lm: dict, visual: dict):
    """A Qwen3_5Config with the numbers Qwen/Qwen3.5-0.8B's published shapes fix (no config.json could be found
    offline). The DeltaNet shapes fix only the product of key heads and key head size (2,048): it is split as the
    value heads are (16 x 128); the tower's head count (no shape shows it) is hidden / 64."""
    from transformers import Qwen3_5Config

    count = 1 + max(int(n.split(".")[1]) for n in lm if n.startswith("layers."))
    kinds = ["linear_attention" if f"layers.{i}.linear_attn.A_log" in lm else "full_attention" for i in range(count)]
    full, linear = kinds.index("full_attention"), kinds.index("linear_attention")
    head_dim = lm[f"layers.{full}.self_attn.q_norm.weight"][0]
    value_heads, value_dim = lm[f"layers.{linear}.linear_attn.A_log"][0], lm[f"layers.{linear}.linear_attn.norm.weight"][0]
    qkv = lm[f"layers.{linear}.linear_attn.in_proj_qkv.weight"][0]
    key_product = (qkv - value_heads * value_dim) // 2
    vocab, hidden = lm["embed_tokens.weight"]
    text = dict(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=count, layer_types=kinds, head_dim=head_dim,
        intermediate_size=lm["layers.0.mlp.gate_proj.weight"][0],
        num_attention_heads=lm[f"layers.{full}.self_attn.q_proj.weight"][0] // (2 * head_dim),  # queries and gates
        num_key_value_heads=lm[f"layers.{full}.self_attn.k_proj.weight"][0] // head_dim,
        linear_num_value_heads=value_heads, linear_value_head_dim=value_dim,
        linear_num_key_heads=key_product // value_dim, linear_key_head_dim=value_dim,
        linear_conv_kernel_dim=lm[f"layers.{linear}.linear_attn.conv1d.weight"][-1], tie_word_embeddings=True)
    width = visual["patch_embed.proj.weight"][0]
    vision = dict(
        depth=1 + max(int(n.split(".")[1]) for n in visual if n.startswith("blocks.")), hidden_size=width,
        num_heads=width // 64, intermediate_size=visual["blocks.0.mlp.linear_fc1.weight"][0],
        patch_size=visual["patch_embed.proj.weight"][-1], temporal_patch_size=visual["patch_embed.proj.weight"][2],
        spatial_merge_size=int((visual["merger.linear_fc1.weight"][1] // width) ** 0.5),
        out_hidden_size=visual["merger.linear_fc2.weight"][0], num_position_embeddings=visual["pos_embed.weight"][0])
    return Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)


def test_the_published_qwen3_5_0_8b_checkpoint_maps_onto_ours():
    """Qwen/Qwen3.5-0.8B's single-file checkpoint (all 488 tensors with shapes; fixtures README) through the qwen3_5
    vision family: every name matches a prefix (the multi-token-prediction head is skipped), the LM and tower
    tensors are exactly what the loader reads, and every one has the published shape and transformers'."""
    published = _shapes("qwen3.5-0.8b")
    assert len(published) == 488
    config = _qwen3_5_config(_shapes("qwen3.5-0.8b", "model.language_model."), _shapes("qwen3.5-0.8b", "model.visual."))
    assert (config.text_config.num_hidden_layers, config.text_config.layer_types.count("full_attention")) == (24, 6)
    family = family_for("qwen3_5")
    with torch.device("meta"):
        ours = family.adapter(config, family, None, None, "Qwen3.5-0.8B")
        reference = family.reference()(config)
    prefixes = tuple(prefix for prefix, _ in family.weights.prefixes)
    assert all(name.startswith(prefixes) for name in published)
    visual, text, head = split_checkpoint(family.weights, dict.fromkeys(published, True))
    read = {n for _, sources in _sources(ours) for n in sources}
    assert read == set(text) and head is None, (sorted(read ^ set(text))[:5], head)
    assert set(visual) == set(ours.visual.state_dict()), sorted(set(visual) ^ set(ours.visual.state_dict()))[:5]
    theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    checked = 0
    for name, tensor in hf_state_dict(ours).items():
        assert tuple(tensor.shape) == published[name] == theirs[name], (name, tuple(tensor.shape), published[name],
                                                                        theirs.get(name))
        checked += 1
    assert checked == 488 - 15  # all but the multi-token-prediction head
