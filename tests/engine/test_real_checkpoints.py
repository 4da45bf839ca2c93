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
