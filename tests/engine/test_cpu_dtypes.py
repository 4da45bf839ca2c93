"""The CPU's fast paths: what dtype="auto" picks, bf16 engines, and int4 weight-only linears.

Tolerances are named; a failure prints the max and mean difference. References:
- the int4 kernel against the dequantised weight it stands for (float32 matmul);
- a bf16 engine against float32 (logit cosine) and against Hugging Face's own bf16 model (greedy tokens);
- an int4 engine's decode steps (the int4 kernel) against its prefill path (the dense dequantised weight).
"""

import copy
import logging
from unittest.mock import patch

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from engine.core import dtypes
from models.int_linear import INT8_WIDE_ROWS, Int4Linear, Int8DynamicLinear, dequantize_int4, quantize_weight_int4
from tests.engine.conftest import hf_greedy, random_prompt

_real_auto_quantization = dtypes.auto_quantization  # read at collection: the suite's autouse fixture patches it

INT4_KERNEL_ATOL = 0.05  # bf16 activations inside the kernel: ~3 significant digits on outputs of size ~2
BF16_LOGIT_COSINE = 0.995  # a tiny random model's logits in bf16 vs float32, every position
# int4 (groups of 32) vs float32, mean over positions: random 64-wide weights with initializer range 0.25 are the
# worst case for 4 bits (nf4 falls to cosine ~0.69 on them); real models are measured by `dossier bench quant`.
INT4_MEAN_LOGIT_COSINE = 0.85
INT8_RELATIVE_ERROR = 0.03  # int8 weights per channel and 7-bit activations per call: ~1% of the output's norm
INT8_LOGIT_COSINE = 0.98  # int8 vs float32 on the tiny model, every position


def _diff(a: torch.Tensor, b: torch.Tensor) -> str:
    d = (a.float() - b.float()).abs()
    return f"max diff {d.max():.4g}, mean {d.mean():.4g}"


REAL_CPU_BF16_FLAGS = dtypes.cpu_bf16_flags  # before tests/conftest.py's float32_means_auto replaces it per test


def test_auto_dtype_follows_the_cpu_flags(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(dtypes, "Path", lambda _: cpuinfo)
    monkeypatch.setattr(dtypes, "cpu_bf16_flags", REAL_CPU_BF16_FLAGS)
    for flags, expected in [("fpu sse avx2 fma", "float32"), ("avx2 avx512f avx512_bf16 avx512_vnni", "bfloat16"),
                            ("avx2 amx_bf16 amx_tile", "bfloat16")]:
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        dtypes.cpu_bf16_flags.cache_clear()
        choice = dtypes.auto_dtype("cpu")
        assert choice.name == expected, (flags, choice)
        assert ("avx512_bf16" in choice.reason or "amx_bf16" in choice.reason)
    assert dtypes.auto_dtype("cuda").name == "bfloat16"
    dtypes.cpu_bf16_flags.cache_clear()


def test_bf16_on_a_cpu_without_it_warns_once(monkeypatch, caplog):
    monkeypatch.setattr(dtypes, "cpu_bf16_flags", lambda: ())
    dtypes.warn_if_emulated.cache_clear()
    with caplog.at_level(logging.WARNING, logger="engine.core.dtypes"):
        for _ in range(3):
            assert EngineConfig(device="cpu", dtype="bfloat16").resolved_dtype() == torch.bfloat16
        assert EngineConfig(device="cpu", dtype="auto").resolved_dtype() == torch.float32
    warnings = [r for r in caplog.records if "slower than float32" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    dtypes.warn_if_emulated.cache_clear()


@pytest.mark.parametrize("rows", [1, 5, 16, 40])
@pytest.mark.parametrize("activation", [torch.float32, torch.bfloat16])
def test_int4_kernel_matches_its_dequantised_weight(rows, activation):
    torch.manual_seed(rows)
    linear = torch.nn.Linear(256, 96).to(activation)
    layer = Int4Linear(linear, group_size=64, dense_rows=8)
    codes, scale, zero = quantize_weight_int4(linear.weight.data, 64)
    weight = dequantize_int4(codes, scale, zero, 64)  # (96, 256) float32
    assert (codes >= 0).all() and (codes <= 15).all()
    assert (weight - linear.weight.float()).abs().max() <= scale.max() / 2 + 1e-6  # one rounding step at most
    x = torch.randn(rows, 256).to(activation)
    want = x.float() @ weight.T + linear.bias.float()
    got = layer(x)
    assert got.dtype == activation and got.shape == (rows, 96)
    assert torch.allclose(got.float(), want, atol=INT4_KERNEL_ATOL * (2 if activation == torch.bfloat16 else 1),
                          rtol=0.02), f"rows={rows} {activation}: {_diff(got, want)}"


def test_int4_without_the_dense_copy_holds_only_codes():
    linear = torch.nn.Linear(512, 256)
    slim = Int4Linear(linear, group_size=128, keep_dense=False)
    full = Int4Linear(linear, group_size=128)
    slim_bytes = sum(b.numel() * b.element_size() for b in slim.buffers())
    assert slim_bytes < 0.2 * linear.weight.numel() * 4  # fp32 -> 4 bits + (scale, zero) per 128
    x = torch.randn(64, 512)  # above dense_rows: full takes the dense path, slim the kernel
    assert torch.allclose(slim(x), full(x), atol=0.1), _diff(slim(x), full(x))


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_int8_dynamic_kernel_matches_float32_within_its_rounding(rows):
    torch.manual_seed(rows)
    linear = torch.nn.Linear(256, 96)
    layer = Int8DynamicLinear(linear)
    x = torch.randn(rows, 256)
    want = linear(x)
    got = layer(x)
    relative = (got - want).norm() / want.norm()
    assert got.dtype == torch.float32 and got.shape == (rows, 96)
    assert relative < INT8_RELATIVE_ERROR, f"rows={rows}: relative error {relative:.4f}, {_diff(got, want)}"
    assert layer(x.bfloat16()).dtype == torch.bfloat16


@pytest.mark.parametrize("bias", [False, True])
def test_int8_forward_is_bitwise_the_row_scaled_kernel(bias):
    """The forward's in-place scale and copy-free row peak compute exactly the formula they replaced."""
    torch.manual_seed(3)
    linear = torch.nn.Linear(256, 96, bias=bias)
    layer = Int8DynamicLinear(linear, wide=False)
    x = torch.randn(300, 256) * torch.rand(300, 1) * 10
    peak = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6)
    kernel = torch.ops.quantized.linear_dynamic(x / peak, layer._packed, True)
    want = kernel * peak if not bias else torch.addcmul(linear.bias.data, kernel, peak)
    assert torch.equal(layer(x), want)


def test_the_silu_mlp_in_place_equals_the_copying_one():
    """Without autograd the decoder's SiLU MLP runs in place; it computes the bits the copying one does.

    Both through the layer's own products (`_project`: oneDNN for float32 on a CPU not made by Intel,
    models/cpu_matmul.py); the autograd path (F.linear, MKL) agrees to a float32 rounding.
    """
    from models.decoder import DecoderLayer, LayerSpec

    torch.manual_seed(0)
    layer = DecoderLayer(LayerSpec(hidden=32, intermediate=80, heads=4, kv_heads=2, head_dim=8, eps=1e-6), index=0)
    x = torch.randn(7, layer.gate_up_proj.in_features)
    with torch.enable_grad():  # the copying path (training, autograd)
        trained = layer.mlp(x).detach()
    with torch.inference_mode():
        got = layer.mlp(x)
        gate, up = layer._project(layer.gate_up_proj, x).split(layer.spec.intermediate, -1)
        want = layer._project(layer.down_proj, torch.nn.functional.silu(gate) * up)
    assert torch.equal(got, want)
    torch.testing.assert_close(got, trained, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif("onednn" not in torch.backends.quantized.supported_engines, reason="torch built without oneDNN")
def test_int8_wide_steps_run_on_onednn_and_agree_with_fbgemm():
    """Steps of INT8_WIDE_ROWS rows or more take the oneDNN copy; both kernels give the same int8 arithmetic."""
    torch.manual_seed(3)
    linear = torch.nn.Linear(256, 96)
    narrow, wide = Int8DynamicLinear(linear, wide=False), Int8DynamicLinear(linear, wide=True)
    assert wide.weight_bytes == narrow.weight_bytes + 256 * 96  # the second int8 copy is counted
    calls = []
    real = torch.ops.quantized.linear_dynamic
    for rows in (1, INT8_WIDE_ROWS - 1, INT8_WIDE_ROWS, 300):
        x = torch.randn(rows, 256)
        calls.clear()
        with patch.object(torch.ops.quantized, "linear_dynamic",
                          lambda a, packed, r: calls.append(packed) or real(a, packed, r)):
            got = wide(x)
        assert calls == [wide._wide if rows >= INT8_WIDE_ROWS else wide._packed], rows
        want = narrow(x)
        # int32 sums are exact in both; a few activations may round to the neighbouring 7-bit code
        assert (got - want).norm() / want.norm() < 1e-3, f"rows={rows}: {_diff(got, want)}"
        assert (got - linear(x)).norm() / linear(x).norm() < INT8_RELATIVE_ERROR


def test_int8_engine_quantises_on_the_cpu_kernel_and_stays_close_to_float32(tiny_llama):
    from benchmarks.quant_quality import sequence_logits
    from models.quantize import weight_bytes

    folder, _ = tiny_llama
    config = dict(num_kv_blocks=128, block_size=4, dtype="float32")
    engine = Engine.from_pretrained(str(folder), EngineConfig(quantization="int8", **config))
    reference = Engine.from_pretrained(str(folder), EngineConfig(**config))
    assert all(isinstance(layer.down_proj, Int8DynamicLinear) for layer in engine.adapter.layers)
    copies = 2 if engine.adapter.layers[0].down_proj._wide is not None else 1  # + oneDNN's copy on AMX CPUs
    assert weight_bytes(engine.adapter.layers) < (0.05 + 0.25 * copies) * weight_bytes(reference.adapter.layers)
    tokens = random_prompt(30, seed=11)
    cosine = torch.nn.functional.cosine_similarity(sequence_logits(engine, tokens), sequence_logits(reference, tokens),
                                                   dim=-1)
    assert cosine.min() > INT8_LOGIT_COSINE, f"int8 vs float32 logits: min cosine {cosine.min():.4f}"


def test_int8_on_the_cpu_runs_the_output_head_in_int8_too(tiny_llama):
    """The head (tied or not) gets an int8 copy that compute_logits uses; the embeddings for the lookup stay float32."""
    folder, _ = tiny_llama
    config = dict(num_kv_blocks=128, block_size=4, dtype="float32")
    engine = Engine.from_pretrained(str(folder), EngineConfig(quantization="int8", **config))
    reference = Engine.from_pretrained(str(folder), EngineConfig(**config))
    adapter = engine.adapter
    assert isinstance(adapter.int8_head, Int8DynamicLinear)
    assert adapter.embed_tokens.weight.dtype == torch.float32
    assert not hasattr(reference.adapter, "int8_head")
    hidden = torch.randn(5, adapter.embed_tokens.weight.shape[1], generator=torch.Generator().manual_seed(3))
    got = adapter.compute_logits(hidden)
    assert torch.equal(got, adapter.int8_head(hidden).float())  # the int8 head is what runs
    float_logits = hidden @ adapter.output_weight().T
    assert not torch.equal(got, float_logits)
    cosine = torch.nn.functional.cosine_similarity(got, float_logits, dim=-1)
    assert cosine.min() > INT8_LOGIT_COSINE, f"int8 head vs float32: min cosine {cosine.min():.4f}"


def _int4_config(**extra) -> EngineConfig:
    return EngineConfig(**{"num_kv_blocks": 128, "block_size": 4, "dtype": "float32", "quantization": "int4",
                           "quantization_group_size": 32, **extra})


def test_int4_engine_quantises_every_decoder_linear_and_logs_memory(tiny_llama, caplog):
    folder, _ = tiny_llama
    with caplog.at_level("WARNING", logger="models.loading"):  # a library logs; the CLI shows warnings on stderr
        engine = Engine.from_pretrained(str(folder), _int4_config())
    layers = [m for layer in engine.adapter.layers for m in layer.modules() if isinstance(m, Int4Linear)]
    assert len(layers) == 4 * len(engine.adapter.layers)  # qkv, o, gate_up, down
    assert not isinstance(engine.adapter.lm_head, Int4Linear)
    assert "int4: 8 linear layers quantised; weights" in caplog.text


def test_int4_engine_decode_kernel_agrees_with_its_prefill_path(tiny_llama):
    """Greedy decode (the int4 kernel, one row per step) equals teacher-forced argmax of one prefill (the dense path)."""
    from benchmarks.quant_quality import sequence_logits

    folder, _ = tiny_llama
    engine = Engine.from_pretrained(str(folder), _int4_config())
    reference = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=128, block_size=4, dtype="float32"))
    prompt = random_prompt(20, seed=5)
    session = engine.open_session()
    session.append(prompt)
    out = session.generate(SamplingParams(max_new_tokens=10, ignore_eos=True)).output_token_ids
    logits = sequence_logits(engine, prompt + out)  # (30, vocab) through the dense dequantised weights
    assert logits[len(prompt) - 1: -1].argmax(-1).tolist() == out
    fp32 = sequence_logits(reference, prompt + out)
    cosine = torch.nn.functional.cosine_similarity(logits, fp32, dim=-1)
    assert cosine.mean() > INT4_MEAN_LOGIT_COSINE, f"int4 vs float32 logits: mean cosine {cosine.mean():.4f}"


def test_int4_uses_smaller_groups_where_128_does_not_divide_and_says_so(tiny_llama, caplog):
    folder, _ = tiny_llama  # hidden 64: not a multiple of the default group size 128
    with caplog.at_level(logging.WARNING, logger="models.quantize"):
        engine = Engine.from_pretrained(str(folder), _int4_config(quantization_group_size=128))
    for layer in engine.adapter.layers:  # 64 inputs: groups of 64; down_proj has 128 inputs: groups of 128
        assert [m.group_size for m in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj)] == [64, 64, 64]
        assert layer.down_proj.group_size == 128
    assert "6 linear layer(s) use groups of 64" in caplog.text


def test_int4_keeps_a_layer_it_cannot_pack_and_names_it(caplog):
    from models.quantize import quantize_linears

    model = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.Linear(64, 24), torch.nn.Linear(24, 32))
    with caplog.at_level(logging.WARNING, logger="models.quantize"):
        assert quantize_linears(model, "int4") == 1
    assert isinstance(model[0], Int4Linear) and isinstance(model[1], torch.nn.Linear)
    assert "keeps 2 linear layer(s)" in caplog.text and "1 (64 inputs, 24 outputs)" in caplog.text
    assert "2 (24 inputs, 32 outputs)" in caplog.text


def test_native_kernels_refuse_what_they_cannot_do():
    from models.quantize import quantize_linears
    from tools.errors import DossierError

    with pytest.raises(DossierError, match="group_size must be 32, 64, 128 or 256"):
        EngineConfig(quantization="int4", quantization_group_size=100)
    with pytest.raises(DossierError, match="on a GPU use nf4 or int8"):
        quantize_linears(torch.nn.Sequential(torch.nn.Linear(128, 128)), "nf4", backend="native")


def test_a_quantised_layer_that_gives_nan_is_refused(monkeypatch):
    """bitsandbytes' NF4 returns NaN on CPUs with avx512_bf16: the load check must catch it, whatever the kernel."""
    from models import int_linear
    from models.quantize import QuantizationCheckError, quantize_linears

    monkeypatch.setattr(int_linear.Int4Linear, "forward", lambda self, x: torch.full((x.shape[0], self.out_features),
                                                                                     float("nan")))
    with pytest.raises(QuantizationCheckError, match="non-finite results on this machine"):
        quantize_linears(torch.nn.Sequential(torch.nn.Linear(128, 64)), "int4")


def test_bf16_engine_logits_close_to_float32_and_tokens_equal_hf_bf16(tiny_llama):
    from benchmarks.quant_quality import sequence_logits

    folder, hf = tiny_llama
    config = dict(num_kv_blocks=128, block_size=4, attention_backend="sdpa")
    bf16 = Engine.from_pretrained(str(folder), EngineConfig(dtype="bfloat16", **config))
    fp32 = Engine.from_pretrained(str(folder), EngineConfig(dtype="float32", **config))
    assert bf16.adapter.dtype == torch.bfloat16 and bf16.runner.k_cache.dtype == torch.bfloat16
    tokens = random_prompt(40, seed=9)
    cosine = torch.nn.functional.cosine_similarity(sequence_logits(bf16, tokens), sequence_logits(fp32, tokens), dim=-1)
    assert cosine.min() > BF16_LOGIT_COSINE, f"bf16 vs float32 logits: min cosine {cosine.min():.4f}"
    prompt = random_prompt(17, seed=3)
    session = bf16.open_session()
    session.append(prompt)
    ours = session.generate(SamplingParams(max_new_tokens=8, ignore_eos=True)).output_token_ids
    hf_bf16 = copy.deepcopy(hf).to(torch.bfloat16)  # a copy: the session's float32 reference must stay unrounded
    assert ours == hf_greedy(hf_bf16, prompt, 8, None)


@pytest.mark.parametrize("mode", ["int4", "int8"])
def test_the_load_check_accepts_a_layer_with_a_large_bias(mode):
    """Qwen2's qkv_proj has a bias far larger than x·W: the check compares the matmuls, not the bias."""
    from models.quantize import quantize_linears

    model = torch.nn.Sequential(torch.nn.Linear(128, 64))
    torch.nn.init.constant_(model[0].bias, 50.0)
    assert quantize_linears(model, mode) == 1


def test_bench_quant_reports_every_variant_against_float32(tiny_llama):
    from benchmarks.quant_variants import compare_variants

    folder, _ = tiny_llama
    result = compare_variants(str(folder), ("bfloat16", "int8"), new_tokens=4, prompt_tokens=16, decode_tokens=2,
                              threads=1)
    rows = {row["variant"]: row for row in result["rows"]}
    assert list(rows) == ["float32", "bfloat16", "int8"]
    assert rows["float32"]["top1_agreement"] is None
    assert all(0.0 <= rows[v]["top1_agreement"] <= 1.0 and rows[v]["positions"] == 8 * (4 + 1) for v in ("bfloat16", "int8"))
    assert rows["bfloat16"]["dtype"] == "bfloat16" and rows["int8"]["dtype"] == "float32"
    assert rows["int8"]["decode_bytes_per_token"] < rows["float32"]["decode_bytes_per_token"]
    assert rows["bfloat16"]["memory_vs_float32"] == pytest.approx(0.5, abs=0.01)
    for row in rows.values():
        assert row["decode_tok_s_batch1"] > 0 and 0 < row["decode_batch1_fraction_of_bound"]
    assert result["copy_bandwidth_gb_s"] > 0


def test_cpu_linears_take_onednn_only_off_intel_and_outside_autograd(monkeypatch):
    """models/cpu_matmul.linear: oneDNN's product on a CPU not made by Intel (equal to F.linear to a float32
    rounding), F.linear on Intel, in autograd (a backward exists) and for other dtypes."""
    from models import cpu_matmul

    torch.manual_seed(1)
    weight, bias = torch.randn(48, 40), torch.randn(48)
    x = torch.randn(5, 40)
    calls = []
    real = torch.ops.mkldnn._linear_pointwise

    class Spy:  # torch.ops entries cannot be monkeypatched one by one; the namespace attribute can
        def _linear_pointwise(self, *args):
            calls.append(args[0].shape)
            return real(*args)

    monkeypatch.setattr(torch.ops, "mkldnn", Spy())
    for vendor, expect in (("AuthenticAMD", True), ("GenuineIntel", False), ("", False)):
        monkeypatch.setattr(cpu_matmul, "cpu_vendor", lambda vendor=vendor: vendor)
        cpu_matmul.onednn_float32.cache_clear()
        calls.clear()
        with torch.inference_mode():
            got = cpu_matmul.linear(x, weight, bias)
            cpu_matmul.linear(x.bfloat16(), weight.bfloat16())  # other dtypes: F.linear
        torch.testing.assert_close(got, torch.nn.functional.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
        assert (calls == [x.shape]) is (expect and torch.backends.mkldnn.is_available()), (vendor, calls)
        trained = weight.clone().requires_grad_()
        cpu_matmul.linear(x, trained, bias).sum().backward()  # autograd: F.linear, whatever the vendor
        assert trained.grad is not None and len(calls) == (1 if calls else 0)
    cpu_matmul.onednn_float32.cache_clear()


def test_quantization_auto_is_int8_only_on_a_cpu_without_native_bf16_with_the_dtype_left_to_auto(monkeypatch):
    from engine.cli.options import QUANTIZATION, parse_quantization
    from engine.core import dtypes
    from tools.errors import DossierError

    monkeypatch.setattr(dtypes, "auto_quantization", _real_auto_quantization)
    assert _real_auto_quantization("cpu", "auto").name == "int8"  # the suite's CPU has no native bf16
    assert _real_auto_quantization("cpu", "float32").name is None  # a pinned dtype is kept
    assert _real_auto_quantization("cuda", "auto").name is None
    assert EngineConfig(device="cpu", quantization="auto").resolved_quantization() == "int8"
    assert EngineConfig(device="cpu", dtype="float32", quantization="auto").resolved_quantization() is None
    assert EngineConfig(device="cpu", quantization="int4").resolved_quantization() == "int4"
    monkeypatch.setattr(dtypes, "cpu_bf16_flags", lambda: ("avx512_bf16",))
    assert _real_auto_quantization("cpu", "auto").name is None
    assert "avx512_bf16" in _real_auto_quantization("cpu", "auto").reason
    with pytest.raises(DossierError, match="auto"):
        EngineConfig(quantization="int3")
    assert QUANTIZATION == "auto" and parse_quantization("none") is None and parse_quantization("None") is None


def test_an_engine_built_with_quantization_auto_keeps_the_concrete_choice(tiny_llama, monkeypatch):
    """Engine.from_pretrained resolves "auto" once, at load, when the model's size is known: int8 from
    AUTO_INT8_FROM weights in the linears, float32 below (the engine's config, what runs record, says which)."""
    from engine import Engine
    from engine.core import dtypes
    from models.int_linear import Int8DynamicLinear
    from models.quantize import linear_parameters

    monkeypatch.setattr(dtypes, "auto_quantization", _real_auto_quantization)
    folder, _ = tiny_llama
    small = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=64, block_size=4, quantization="auto"))
    assert small.config.quantization is None and small.adapter.quantization is None
    assert not any(isinstance(module, Int8DynamicLinear) for module in small.adapter.modules())
    size = linear_parameters(small.adapter)
    assert 0 < size < dtypes.AUTO_INT8_FROM
    monkeypatch.setattr(dtypes, "AUTO_INT8_FROM", size)  # as if this model were large enough
    engine = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=64, block_size=4, quantization="auto"))
    assert engine.config.quantization == "int8"
    assert any(isinstance(module, Int8DynamicLinear) for module in engine.adapter.modules())
    pinned = Engine.from_pretrained(str(folder), EngineConfig(num_kv_blocks=64, block_size=4, dtype="float32",
                                                              quantization="auto"))
    assert pinned.config.quantization is None
