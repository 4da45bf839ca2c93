"""LoRA adapters: pairs render to the engine's own tokens, a tiny model's loss falls, and an adapter merged
at load gives the logits of peft's own forward."""

import json

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from engine.train.pairs import QueryPair
from engine.train.tokens import encode_pair, render_prompt
from tests.vlm.reference import LogitSpy
from tools.errors import DossierError

pytest.importorskip("peft", reason="the train extra (peft) is not installed; pip install -e .[dev] has it")

MESSAGES = [("system", "You answer questions. Tools: search, answer."), ("user", "Question: revenue in 2019?"),
            ("assistant", '{"tool": "search", "query": "revenue"}'), ("user", "Search results for: revenue\n\n[1] ...")]


def _engine(folder, **config):
    return Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=256, **config))


def test_a_pair_renders_to_the_tokens_an_engine_session_holds(tiny_folder):
    folder, _ = tiny_folder
    engine = _engine(folder)
    session = engine.open_session()
    session.append_message(*MESSAGES[0])
    session.append_message(*MESSAGES[1])
    session.append_generation_prompt()
    generated = engine.processor.encode(MESSAGES[2][1])
    session.append(generated)  # as if the model had generated its search call
    session._turn_start = session.num_tokens - len(generated)
    session.append_message(*MESSAGES[3])
    session.append_generation_prompt()
    assert render_prompt(engine.processor, MESSAGES) == session.token_ids
    pair = QueryPair("q", ["d"], "silver", None, 2, 2, MESSAGES, '{"tool": "search", "query": "x"}', "x", 1)
    example = encode_pair(engine.processor, pair)
    target = example["input_ids"][example["prompt_tokens"]:]
    assert example["labels"][:example["prompt_tokens"]] == [-100] * example["prompt_tokens"]
    assert engine.processor.decode(target) == pair.target and target[-1] in engine.processor.stop_token_ids
    assert encode_pair(engine.processor, pair, max_tokens=10) is None


def _lora_folder(folder, model, out, seed=0):
    """A peft LoRA adapter with random (non-zero) A and B on every projection of the tiny model."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    base = type(model)(model.config)
    base.load_state_dict(model.state_dict())
    config = LoraConfig(r=4, lora_alpha=8, init_lora_weights=False, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    tuned = get_peft_model(base, config).eval()
    with torch.no_grad():
        for name, param in tuned.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    tuned.save_pretrained(out)
    return tuned


def test_an_adapter_merged_at_load_gives_peft_logits(tiny_folder, tmp_path):
    folder, model = tiny_folder
    tuned = _lora_folder(folder, model, tmp_path / "adapter")
    prompt = [5 + (i * 37) % 400 for i in range(29)]
    with torch.inference_mode():
        reference = tuned(torch.tensor([prompt])).logits[0, -1].float()  # peft's own forward
    rows = {}
    for name, lora in (("tuned", str(tmp_path / "adapter")), ("base", None)):
        engine = _engine(folder, lora=lora, attention_backend="sdpa")
        spy = LogitSpy(engine)
        session = engine.open_session()
        session.append(prompt)
        session.generate(SamplingParams(max_new_tokens=1, ignore_eos=True))
        rows[name] = spy.rows[session.seq.seq_id][0]
    delta = (rows["tuned"] - reference).abs()
    assert delta.max() <= 1e-4, f"max |Δlogit| {delta.max():.3g}, mean {delta.mean():.3g}"
    assert (rows["base"] - reference).abs().max() > 1e-2, "the adapter changed nothing: the check would be vacuous"


def test_an_adapter_for_another_model_is_refused(tiny_folder, tmp_path):
    folder, _ = tiny_folder
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 2}))
    from safetensors.torch import save_file

    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(2, 7),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.zeros(64, 2)},
              tmp_path / "bad" / "adapter_model.safetensors")
    with pytest.raises(DossierError, match="trained for another model"):
        _engine(folder, lora=str(tmp_path / "bad"))
    with pytest.raises(DossierError, match="adapter_config.json"):
        _engine(folder, lora=str(tmp_path / "missing"))


def test_a_two_layer_model_trains_a_few_steps_and_its_loss_falls(tiny_folder, tmp_path):
    from engine.train.sft import LoraSettings, train_lora

    folder, _ = tiny_folder
    generator = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(16):  # random prompts, one fixed completion: learnable in a few steps
        prompt = torch.randint(4, 400, (24,), generator=generator).tolist()
        target = [40, 41, 42, 43, 2]
        examples.append({"input_ids": prompt + target, "labels": [-100] * 24 + target})
    steps = []
    result = train_lora(folder, examples[:12], examples[12:], LoraSettings(
        rank=4, alpha=8, learning_rate=3e-2, max_steps=8, batch_size=4, grad_accum=1, warmup_ratio=0.0),
        tmp_path / "adapter", progress=lambda step, total, logs: steps.append((step, total)))
    assert result.steps == 8 and steps[-1] == (8, 8)
    assert result.eval_losses[-1]["eval_loss"] < result.initial_eval_loss - 0.5, result.eval_losses
    assert result.train_losses[-1]["loss"] < result.train_losses[0]["loss"]
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    assert 0 < result.trainable_parameters < result.total_parameters
    _engine(folder, lora=str(tmp_path / "adapter"))  # the trained adapter loads into the engine
