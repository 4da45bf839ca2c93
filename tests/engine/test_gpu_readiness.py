"""Issue 46: what a review of the GPU path found, each reproduced and fixed on the CPU.

One test (or a few) per finding; each failed on the code before the fix. The GPU itself is
not needed: the CPU runs the same functions the GPU path runs (the decode-graph forward, the
loader, the device choice, the sampler, the block tables)."""

import json

import pytest
import torch

from engine import Engine, EngineConfig
from engine.core.cuda_graphs import DecodeGraphs
from tools.errors import DossierError


def test_finding4_the_captured_decode_path_builds_no_autograd_graph(tiny_llama):
    """What a CUDA graph captures (`DecodeGraphs.forward`, called as the capture calls it) runs under inference
    mode with parameters that need no grad: no autograd graph, and the KV cache stays a leaf."""
    folder, _ = tiny_llama
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=64, attention_backend="sdpa"))
    runner = engine.runner
    assert not any(p.requires_grad for p in runner.adapter.parameters()), "parameters still require grad"
    graphs = DecodeGraphs(runner, 4, capture=False)
    logits = graphs.forward(4)  # the capture's own call: outside any inference_mode of the caller
    assert logits.grad_fn is None and not logits.requires_grad, f"captured output carries {logits.grad_fn}"
    assert runner.k_cache.is_leaf and runner.k_cache.grad_fn is None


def test_finding6_a_gguf_is_converted_straight_into_the_model_dtype(tmp_path, monkeypatch):
    """A 7B GGUF converted to float32 is ~30 GB of RAM and of cache; converted in the model's dtype, half."""
    from safetensors import safe_open

    from models.loading import load_adapter
    from tests.models.test_gguf_progress import write_tiny_gguf

    write_tiny_gguf(tmp_path / "tiny.gguf")
    monkeypatch.setenv("DOSSIER_CACHE", str(tmp_path / "cache"))
    adapter = load_adapter(tmp_path / "tiny.gguf", dtype=torch.bfloat16)
    assert next(adapter.parameters()).dtype == torch.bfloat16
    converted = list((tmp_path / "cache" / "models").glob("*/model.safetensors"))
    assert len(converted) == 1, converted
    with safe_open(str(converted[0]), "pt") as f:
        dtypes = {f.get_slice(name).get_dtype() for name in f.keys()}
    assert dtypes == {"BF16"}, f"the conversion was written as {dtypes}, not bfloat16"


def test_finding6_float32_keeps_its_cache_and_a_second_dtype_converts_once(tmp_path, monkeypatch):
    from models.loading import resolve_model_dir
    from tests.models.test_gguf_progress import write_tiny_gguf

    write_tiny_gguf(tmp_path / "tiny.gguf")
    monkeypatch.setenv("DOSSIER_CACHE", str(tmp_path / "cache"))
    f32 = resolve_model_dir(tmp_path / "tiny.gguf", torch.float32)
    bf16 = resolve_model_dir(tmp_path / "tiny.gguf", torch.bfloat16)
    assert f32 != bf16 and bf16.name == f32.name + "-bfloat16"
    assert resolve_model_dir(tmp_path / "tiny.gguf") == f32  # any existing conversion serves the tokenizer


@pytest.mark.parametrize(("built", "usable", "driver", "expected"), [
    ("13.0", False, "570.86.10", ["CUDA 13.0", ">= 580", "570.86.10", "download.pytorch.org/whl/cu126"]),
    (None, False, "560.35.03", ["CPU build", "560.35.03"]),
    ("13.0", False, "580.65.06", ["sees no usable GPU"]),
    ("13.0", True, "580.65.06", None),
    ("13.0", False, None, None),
])
def test_finding14_device_auto_says_why_it_chose_the_cpu(built, usable, driver, expected):
    from engine.core.devices import cpu_fallback_reason

    reason = cpu_fallback_reason(built, usable, driver)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and all(part in reason for part in expected), reason


def test_finding14_the_reason_is_logged_when_auto_resolves(monkeypatch, caplog):
    import engine.core.devices as devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(devices, "driver_version", lambda: "570.86.10")
    devices.auto_device.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            assert EngineConfig(device="auto").resolved_device() == "cpu"
    finally:
        devices.auto_device.cache_clear()
    assert ">= 580" in caplog.text and "570.86.10" in caplog.text


def test_finding14_the_driver_version_is_read_without_cuda(tmp_path):
    from engine.core.devices import driver_version

    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.10  Tue Jan  7 17:35:05 UTC 2025\n"
                       "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert driver_version(version) == "570.86.10"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n")
    assert driver_version(version) == "580.65.06"
    assert driver_version(tmp_path / "absent") is None


def test_finding15_a_remote_code_folder_is_refused_without_a_prompt(tmp_path, monkeypatch):
    """GLM-4V-9B (chatglm) names its own modelling code: transformers would ask on stdin, then raise."""
    from models.loading import load_adapter

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "chatglm", "architectures": ["ChatGLMForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                     "AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration"}}))

    def no_prompt(*args, **kwargs):
        raise AssertionError("transformers asked on stdin")

    monkeypatch.setattr("builtins.input", no_prompt)
    with pytest.raises(DossierError) as refused:
        load_adapter(tmp_path)
    message = str(refused.value)
    assert "needs remote code" in message and "modeling_chatglm" in message and "chatglm" in message
    assert "supported families" in message and "qwen2_vl" in message and "glm4v" in message


class _Row:
    """What `sample` reads of a request."""

    def __init__(self, request_id: int, sampling, seed: int) -> None:
        self.request_id, self.sampling, self.matcher, self.output_token_ids = request_id, sampling, None, []
        self.generator = torch.Generator().manual_seed(seed)


def test_finding9_the_batch_is_sampled_together_with_no_host_copy_per_row(monkeypatch):
    """Before: per sampled row a top-k, a full-vocabulary sort, a `.cpu()` copy and a CPU multinomial."""
    from engine.core import sampler
    from engine.core.sampling_params import SamplingParams

    calls = {"cpu": 0, "sort": 0, "multinomial": 0}

    def counted(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(torch.Tensor, "cpu", counted("cpu", torch.Tensor.cpu))
    monkeypatch.setattr(torch, "sort", counted("sort", torch.sort))
    monkeypatch.setattr(torch, "multinomial", counted("multinomial", torch.multinomial))
    rows = [_Row(i, SamplingParams(temperature=0.8, top_p=0.9, top_k=50, seed=i), seed=i) for i in range(8)]
    rows.append(_Row(8, SamplingParams(), seed=0))  # a greedy row in the same step
    logits = torch.randn(9, 50_000, generator=torch.Generator().manual_seed(0))
    chosen = sampler.sample(logits.clone(), rows, set(), None)
    assert len(chosen) == 9 and chosen[8] == int(logits[8].argmax())
    assert calls == {"cpu": 0, "sort": 1, "multinomial": 0}, calls


def test_finding9_batched_sampling_keeps_the_distribution_and_its_masks():
    from engine.core import sampler
    from engine.core.sampling_params import SamplingParams

    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03]))
    counts = {name: torch.zeros(5) for name in ("plain", "top_k", "top_p")}
    settings = {"plain": SamplingParams(temperature=1.0), "top_k": SamplingParams(temperature=1.0, top_k=2),
                "top_p": SamplingParams(temperature=1.0, top_p=0.8)}
    for draw in range(3000):
        rows = [_Row(draw, settings[name], seed=draw * 3 + j) for j, name in enumerate(settings)]
        for name, token in zip(settings, sampler.sample(logits.repeat(3, 1), rows, set(), None)):
            counts[name][token] += 1
    plain = counts["plain"] / 3000
    assert torch.allclose(plain, torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03]), atol=0.03), plain
    assert counts["top_k"][2:].sum() == 0 and abs(counts["top_k"][0] / 3000 - 2 / 3) < 0.03
    assert counts["top_p"][3:].sum() == 0  # 0.5 + 0.25 < 0.8 <= 0.5 + 0.25 + 0.15: three tokens in the nucleus
    assert abs(counts["top_p"][0] / 3000 - 0.5 / 0.9) < 0.03


def test_finding11_graph_steps_plan_attention_for_the_batch_context_not_the_models(tiny_llama, monkeypatch):
    """Graph decode planned its kernels for the pool's whole context (8-16 Triton programs at a 4k context where
    an eager step plans 128-256); now each graph is planned for a context bucket the batch fits in."""
    from engine import SamplingParams
    from engine.core.cuda_graphs import context_buckets
    from tests.engine.conftest import random_prompt

    folder, _ = tiny_llama
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=1024, attention_backend="sdpa",
                                                              dtype="float32"))
    runner = engine.runner
    runner.graphs = DecodeGraphs(runner, 4, capture=False)
    planned = []
    real = runner.attention.graph_metadata
    monkeypatch.setattr(runner.attention, "graph_metadata",
                        lambda static, batch, context, workspace: planned.append(context) or real(static, batch,
                                                                                                  context, workspace))
    session = engine.open_session()
    session.append(random_prompt(12, seed=3))
    session.generate(SamplingParams(max_new_tokens=6, ignore_eos=True))
    assert runner.max_context >= 2048 and planned, (runner.max_context, planned)
    assert set(planned) == {context_buckets(runner.max_context, 4)[0]}, planned
    assert max(planned) < runner.max_context // 4
    assert context_buckets(32768, 16) == [4096, 8192, 16384, 32768] and context_buckets(100, 16) == [16, 32, 64, 100]


def test_finding5_the_pool_is_sized_from_free_gpu_memory_after_a_warm_up(tiny_llama, monkeypatch):
    """A fixed 2 GiB pool held ~16k tokens of Llama-3.1-8B on an 80 GB card. With no size given on a GPU, the
    runner runs one prefill at the largest chunk, then sizes the pool from what the card has left; here the CUDA
    memory calls are played by a fake 8 GiB card and the warm-up really runs (on the CPU)."""
    from engine.core import model_runner
    from engine.core.model_runner import ModelRunner
    from models.loading import load_adapter

    gib = 2**30
    card = {"allocated": int(0.5 * gib), "peak": 0}
    fake = {
        "synchronize": lambda: None, "empty_cache": lambda: None,
        "reset_peak_memory_stats": lambda: card.update(peak=card["allocated"]),
        "max_memory_allocated": lambda: card["allocated"] + int(0.25 * gib),  # the warm-up's activations
        "memory_allocated": lambda: card["allocated"],
        "mem_get_info": lambda: (6 * gib, 8 * gib),  # 2 GiB in use (weights, another process)
    }
    for name, value in fake.items():
        monkeypatch.setattr(model_runner.torch.cuda, name, value)
    warmed = []
    real_forward = ModelRunner.forward_layout
    monkeypatch.setattr(ModelRunner, "forward_layout",
                        lambda self, layout, pending=(): warmed.append(layout.num_tokens) or real_forward(self, layout))
    adapter = load_adapter(str(tiny_llama[0]), dtype=torch.float32)
    config = EngineConfig(block_size=4, max_num_batched_tokens=64, cuda_graphs=False, attention_backend="sdpa")
    runner = ModelRunner(adapter, config, None)
    assert warmed == [64], "the pool must be sized after a warm-up forward at the largest prefill chunk"
    expected = (int(8 * gib * 0.90) - 2 * gib - int(0.25 * gib)) // runner.per_block
    assert runner.num_blocks == expected and runner.k_cache.shape[1] == expected + 1
    assert "90% of the GPU" in runner.sized_from


def test_finding5_one_default_and_a_load_line_with_the_longest_conversation(tiny_llama):
    from engine.core.kv_budget import CPU_KV_CACHE_GIB, blocks_from_free_memory

    assert EngineConfig().kv_cache_gib is None and EngineConfig().gpu_memory_utilization == 0.90
    engine = Engine.from_pretrained(str(tiny_llama[0]), EngineConfig(block_size=4, dtype="float32"))
    per_block = engine.runner.per_block
    assert engine.runner.num_blocks == int(CPU_KV_CACHE_GIB * 2**30 // per_block)
    line = engine.pool_line()
    assert f"KV pool {engine.runner.num_blocks * 4:,} tokens" in line and "longest conversation" in line
    with pytest.raises(DossierError, match="no GPU memory left for the KV cache.*--gpu-memory-utilization"):
        blocks_from_free_memory(80 * 2**30, 8 * 2**30, 2**30, 2**30, 2**20, 0.9)


def test_finding5_a_pool_too_small_for_max_model_len_is_refused_at_start(tiny_llama):
    with pytest.raises(DossierError, match="KV pool holds 32 tokens, less than one request of max_model_len 64.*"
                                           "--kv-cache-gib"):
        Engine.from_pretrained(str(tiny_llama[0]), EngineConfig(block_size=4, num_kv_blocks=8, max_model_len=64))


def test_finding8_a_step_copies_block_tables_without_a_python_int_per_block(monkeypatch):
    """The layout used to slice each sequence's block list and convert it int by int every step (9 ms of host work
    at 128 x 32k here; benchmarks/bench_step_layout.py). Now it copies each sequence's int32 array: reading the
    table block by block in Python during a step fails this test."""
    from types import SimpleNamespace

    import numpy as np

    from engine.core.block_table import BlockTable
    from engine.core.scheduler import Chunk
    from engine.core.sequence import Sequence
    from engine.core.step_layout import build_layout

    sequences = []
    for i in range(8):
        seq = Sequence(i, 4)
        seq.append(list(range(40)), np.arange(40, dtype=np.int32), 40)
        for block in range(11):
            seq.block_table.append(100 * i + block)
        sequences.append(seq)
    expected = [seq.block_table[:10] for seq in sequences]

    def per_block(*args, **kwargs):
        raise AssertionError("a step read a block table one Python int at a time")

    for name in ("__iter__", "__getitem__", "__reversed__"):
        monkeypatch.setattr(BlockTable, name, per_block)
    layout = build_layout([Chunk(SimpleNamespace(seq=seq), 39, 1, True) for seq in sequences], 4)
    assert layout.block_tables.tolist() == expected
    assert layout.slot_mapping.tolist() == [(100 * i + 9) * 4 + 3 for i in range(8)]


def test_finding7_nf4_and_int8_for_a_gpu_are_quantised_on_the_way_there(monkeypatch):
    """Quantising after loading put the whole bf16 model on the GPU first, so quantising could not make a model
    fit. Now the model is built and loaded on the CPU and each layer is quantised as it moves to the GPU."""
    import models.loading as loading
    import models.quantize as quantize

    built, quantised = [], []
    real_build = loading.build_adapter
    monkeypatch.setattr(loading, "build_adapter", lambda *args, **kwargs: built.append(args[4]) or real_build(*args,
                                                                                                           **kwargs))
    monkeypatch.setattr(quantize, "quantize_linears",
                        lambda model, mode, backend="auto", group_size=32, device=None: quantised.append(
                            (mode, str(device), str(next(model.parameters()).device))) or 0)
    loading.load_adapter("llama-tiny", device="cuda", dtype=torch.bfloat16, quantization="nf4")
    assert built == ["cpu"], f"the model was built on {built} before quantising"
    assert quantised == [("nf4", "cuda", "cpu")], quantised  # quantised from the CPU copy, ending on the GPU


def test_finding5_a_vision_model_warms_its_tower_up_before_the_pool_is_sized(tmp_path):
    """The warm-up that sizes the pool encodes one image at the family's largest size (on the CPU here)."""
    from engine.core.model_runner import _tower_warm_up
    from models.loading import load_adapter
    from tests.vlm.conftest import save_model

    save_model(tmp_path, "qwen2_vl")
    adapter = load_adapter(str(tmp_path), dtype=torch.float32, max_pixels=56 * 56)
    pixels, grid = _tower_warm_up(adapter)
    assert grid.tolist() == [[1, 4, 4]] and pixels.shape == (16, 3 * 2 * 14 * 14)
    with torch.inference_mode():
        adapter.visual(pixels, grid_thw=grid)  # the call the warm-up makes runs
    assert _tower_warm_up(load_adapter("llama-tiny")) is None
