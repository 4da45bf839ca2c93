"""Loading VL models: both checkpoint naming schemes, random-weight shapes, clear errors; GLM turn ends."""

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from models.base import MultimodalItem, Segment
from models.registry import families
from tests.vlm.conftest import make_image
from tests.vlm.reference import LogitSpy
from tests.vlm.test_parity import engine_for
from tools.errors import DossierError


def _first_logits(folder, image) -> torch.Tensor:
    engine = engine_for(folder)
    spy = LogitSpy(engine)
    session = engine.open_session()
    session.append_message("user", "What is on the page?", images=[image])
    session.append_generation_prompt()
    session.generate(SamplingParams(max_new_tokens=1))
    return spy.rows[session.seq.seq_id][0]


def test_both_checkpoint_naming_schemes_load_alike(vl_model, tmp_path):
    """HF saves published names (model.layers.*, visual.*); transformers-5 names (model.language_model.*) load too."""
    import shutil

    from safetensors.torch import save_file

    family, folder, _, _ = vl_model
    engine = engine_for(folder)
    renamed = tmp_path / "v5-names"
    shutil.copytree(folder, renamed)
    for old in renamed.glob("*.safetensors"):
        old.unlink()
    save_file({k: v.contiguous() for k, v in engine.adapter.hf_state_dict().items()}, renamed / "model.safetensors")
    page = make_image(56, 84, 2)
    assert torch.equal(_first_logits(folder, page), _first_logits(renamed, page))


def test_hf_state_dict_round_trips_into_the_hf_model(vl_model):
    family, folder, model, _ = vl_model
    engine = engine_for(folder)
    fresh = type(model)(model.config)
    missing, unexpected = fresh.load_state_dict(engine.adapter.hf_state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    for name, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name


def test_a_missing_tensor_names_itself(vl_model, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    family, folder, _, _ = vl_model
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    tensors = load_file(broken / "model.safetensors")
    victim = next(k for k in tensors if k.endswith("layers.1.mlp.down_proj.weight"))
    del tensors[victim]
    save_file(tensors, broken / "model.safetensors")
    with pytest.raises(DossierError, match=r"checkpoint has no tensor 'layers\.1\.mlp\.down_proj\.weight'"):
        Engine.from_pretrained(str(broken), EngineConfig(num_kv_blocks=16))


@pytest.mark.parametrize("shape", [name for family in families() if family.is_vision_language
                                   for name in family.shapes if name.endswith("-tiny")])
def test_random_weight_shapes_take_token_ids_and_images(shape):
    engine = Engine.from_pretrained(shape, EngineConfig(num_kv_blocks=64, block_size=4, image_max_pixels=84 * 84))
    assert engine.processor is None and engine.adapter.shape.position_dims == 3
    session = engine.open_session()
    session.append([11, 12, 13])
    session.append_segment(engine.adapter.vision.image_segment(make_image(84, 56, 1)))
    session.append([14, 15])
    reply = session.generate(SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert len(reply.output_token_ids) == 3
    assert engine.stats()["vision"]["images_encoded"] == 1


def test_text_only_models_refuse_images():
    engine = Engine.from_pretrained("llama-tiny", EngineConfig(num_kv_blocks=16))
    item = MultimodalItem(0, 2, "page", None)
    with pytest.raises(DossierError, match="text-only model; it cannot take images"):
        engine.open_session().append_segment(Segment([5, 5], mm_items=[item]))


def test_glm_turn_end_token_is_not_repeated(tmp_path):
    """GLM ends a turn by emitting the next role token; the next message must not add it again."""
    from tests.vlm.conftest import save_model

    _, tokenizer = save_model(tmp_path, "glm4v")
    engine = engine_for(tmp_path)
    session = engine.open_session()
    session.append_message("user", "Question?")
    session.append_generation_prompt()
    user = tokenizer.convert_tokens_to_ids("<|user|>")
    session.append(tokenizer.encode("An answer.", add_special_tokens=False) + [user])  # as if generated, stop included
    session.append_message("user", "Next question?")
    messages = [{"role": "user", "content": "Question?"}, {"role": "assistant", "content": "An answer."},
                {"role": "user", "content": "Next question?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert session.token_ids == tokenizer.encode(text, add_special_tokens=False)


def test_gemma3_published_names_load(tmp_path):
    """Gemma-3's published checkpoints keep SigLIP one level down (`vision_tower.vision_model.*`) and the LM under
    `language_model.model.*`; transformers 5 saves `vision_tower.*` (the fixture): both give the same logits."""
    import shutil

    from safetensors.torch import load_file, save_file

    from tests.vlm.conftest import save_model

    folder = tmp_path / "saved"
    save_model(folder, "gemma3")
    published = tmp_path / "published"
    shutil.copytree(folder, published)
    tensors = load_file(published / "model.safetensors")
    renamed = {k.replace("vision_tower.", "vision_tower.vision_model.", 1): v for k, v in tensors.items()}
    assert any(k.startswith("vision_tower.vision_model.") for k in renamed) and any(
        k.startswith("language_model.model.") for k in renamed), sorted(renamed)[:5]
    save_file(renamed, published / "model.safetensors")
    page = make_image(56, 84, 2)
    assert torch.equal(_first_logits(folder, page), _first_logits(published, page))
