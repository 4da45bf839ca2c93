"""bitsandbytes quantisation of the language model: what is quantised, that the engine runs on it, what it costs.

bitsandbytes 0.50 runs on the CPU, so these run here; the SmolLM2 quality figure (top-1 agreement
with the bf16 model, memory saved) is the slow test.
"""

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import random_prompt

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes is the optional 'quant' extra")


def test_vision_language_model_keeps_its_vision_tower():
    from models.loading import load_adapter
    from models.quantize import quantize_linears

    adapter = load_adapter("qwen2-vl-tiny")
    tower_linears = sum(isinstance(m, torch.nn.Linear) for m in adapter.visual.modules())
    replaced = quantize_linears(adapter, "nf4")
    assert replaced == 4 * len(adapter.layers)  # qkv, o, gate_up, down of every decoder layer
    assert all(isinstance(m, bnb.nn.Linear4bit) for layer in adapter.layers
               for m in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj))
    assert not any(isinstance(m, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)) for m in adapter.visual.modules())
    assert sum(isinstance(m, torch.nn.Linear) for m in adapter.visual.modules()) == tower_linears
    assert adapter.lm_head is None or isinstance(adapter.lm_head, torch.nn.Linear)


@pytest.mark.parametrize("mode", ["nf4", "int8"])
def test_quantised_engine_matches_transformers_bitsandbytes(tiny_llama, mode):
    """The anchor: transformers' own bitsandbytes model of the same checkpoint, teacher-forced logits compared.

    On this random 64-wide model nf4 itself moves the logits a lot (cosine to fp32 down to ~0.69 for both
    implementations), so the check is against the same quantisation done by transformers, not against fp32.
    """
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from benchmarks.quant_quality import sequence_logits
    from models.quantize import weight_bytes

    from models.quantize import QuantizationCheckError, quantize_linears

    folder, _ = tiny_llama
    plain = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=64, block_size=4))
    try:  # on a CPU "int8" means FBGEMM's kernel (tests/engine/test_cpu_dtypes.py); bitsandbytes is asked for here
        engine = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=64, block_size=4))
        quantize_linears(engine.adapter, mode, backend="bitsandbytes")
    except QuantizationCheckError as error:  # bitsandbytes 0.50.2's NF4 gives NaN on CPUs with avx512_bf16
        pytest.skip(f"bitsandbytes {mode} is broken on this CPU and Dossier refuses it at load, as it should "
                    f"(tests/engine/test_cpu_dtypes.py checks the refusal): {error}")
    linears = weight_bytes(plain.adapter.layers), weight_bytes(engine.adapter.layers)
    assert linears[1] < (0.2 if mode == "nf4" else 0.35) * linears[0], linears  # fp32 -> 4 / 8 bits (+ constants)
    session = engine.open_session()
    session.append(random_prompt(12, seed=70))
    out = session.generate(SamplingParams(max_new_tokens=6, ignore_eos=True)).output_token_ids
    assert len(out) == 6 and all(0 <= t < engine.adapter.shape.vocab_size for t in out)
    config = (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
              if mode == "nf4" else BitsAndBytesConfig(load_in_8bit=True))
    anchor = AutoModelForCausalLM.from_pretrained(folder, quantization_config=config, device_map="cpu")
    tokens = random_prompt(40, seed=71)
    with torch.inference_mode():
        want = anchor(torch.tensor([tokens])).logits[0].float()
    got = sequence_logits(engine, tokens)
    cosine = torch.nn.functional.cosine_similarity(want, got, dim=-1)  # (40,)
    fp32 = torch.nn.functional.cosine_similarity(sequence_logits(plain, tokens), got, dim=-1)
    assert cosine.min() > 0.99, f"{mode}: min cosine to transformers+bitsandbytes {cosine.min():.4f}"
    assert cosine.mean() > fp32.mean(), "closer to fp32 than to the same quantisation: the check cannot tell"


@pytest.mark.slow
def test_smollm2_nf4_against_bf16():
    """The embedded model in nf4: top-1 agreement with bf16 (teacher-forced) and the memory saved."""
    from benchmarks.quant_quality import compare_quantization

    result = compare_quantization("default", "nf4", "bfloat16", device="cpu", new_tokens=32)
    print(result)
    assert result["positions"] >= 8 * 32
    assert result["top1_agreement"] >= 0.75, result
    assert result["linear_bytes"]["quantized"] < 0.4 * result["linear_bytes"]["reference"], result
