"""The engine on a CUDA device: Triton and flash-attn backends, CUDA graphs against eager, nf4.

All marked `gpu` and skipped without CUDA; `scripts/gpu_check.sh` runs them on a lent GPU. Their
CPU counterparts (the same code paths, interpreted or eager) are in the default suite.
"""

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import hf_greedy, random_prompt

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def run_sessions(engine: Engine, prompts: list[list[int]], new_tokens: int = 10) -> list[list[int]]:
    requests = []
    for prompt in prompts:
        session = engine.open_session()
        session.append(prompt)
        requests.append(session.submit(SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)))
    engine.run_until_idle()
    return [r.output_token_ids for r in requests]


@pytest.mark.parametrize("graphs", [True, False])
def test_triton_engine_fp32_matches_hf(tiny_llama, graphs):
    """fp32 on the GPU with IEEE dots: the same tokens as HF generate, with and without CUDA graphs."""
    folder, hf = tiny_llama
    config = EngineConfig(device="cuda", dtype="float32", attention_backend="triton", cuda_graphs=graphs,
                          block_size=16, num_kv_blocks=256, cuda_graph_max_batch=8)
    engine = Engine.from_pretrained(str(folder), config)
    assert (engine.runner.graphs is not None) == graphs
    prompts = [random_prompt(5 + 9 * i, seed=500 + i) for i in range(6)]
    assert run_sessions(engine, prompts) == [hf_greedy(hf, p, 10, None) for p in prompts]
    if graphs:
        assert engine.runner.graphs.steps >= 9, "decode steps should replay the captured graphs"


@pytest.mark.parametrize("model", ["llama-tiny", "qwen2-vl-tiny"])
def test_cuda_graphs_give_the_eager_tokens_in_bf16(model):
    """bf16, 13 sessions (bucket 16, three padding rows), two turns: graph replay and eager decode agree."""
    outputs = {}
    for graphs in (True, False):
        config = EngineConfig(device="cuda", dtype="bfloat16", cuda_graphs=graphs, cuda_graph_max_batch=16)
        engine = Engine.from_pretrained(model, config)
        sessions = [engine.open_session() for _ in range(13)]
        tokens = []
        for turn in range(2):
            requests = []
            for i, session in enumerate(sessions):
                session.append(random_prompt(20 + 7 * i, seed=600 + 13 * turn + i, vocab=4000))
                requests.append(session.submit(SamplingParams(max_new_tokens=12, ignore_eos=True)))
            engine.run_until_idle()
            tokens.append([r.output_token_ids for r in requests])
        outputs[graphs] = tokens
        assert engine.stats()["attention_backend"] in ("triton", "flash_attn")
    same = sum(a == b for turn in zip(outputs[True], outputs[False]) for a, b in zip(*turn))
    assert same == 26, f"{same} of 26 session turns equal between graph replay and eager decode"


@pytest.mark.skipif(not __import__("importlib").util.find_spec("flash_attn"), reason="flash-attn is not installed")
def test_flash_attn_backend_matches_the_reference():
    """flash-attn with block tables (block_size 256) against the float32 reference, a prefill and a decode step."""
    from engine.core.attention import make_backend
    from engine.core.step_layout import StepLayout, pack_to_device
    from kernels.paged_attention import paged_attention_reference
    from models.base import ModelShape
    from tests.kernels._paged_attention_cases import build

    import numpy as np

    device = torch.device("cuda")
    shape = ModelShape(num_layers=1, num_kv_heads=8, head_dim=128, vocab_size=1, max_positions=8192)
    backend = make_backend("flash_attn", shape, 256, device, torch.bfloat16)
    for lengths in ([(300, 300), (100, 900), (1, 513)], [(1, 1), (1, 777), (1, 2048)]):
        q, k_cache, v_cache, cu, context, tables = build(torch.bfloat16, 32, 8, 128, 256, lengths)
        layout = StepLayout(
            input_ids=np.zeros(len(q), np.int64), positions=np.zeros(len(q), np.int64),
            slot_mapping=np.zeros(len(q), np.int64), cu_seqlens_q=cu.numpy(), context_lens=context.numpy(),
            block_tables=tables.numpy(), sample_rows=np.zeros(0, np.int64),
            max_q_len=max(a for a, _ in lengths), max_context_len=max(b for _, b in lengths),
        )
        meta = backend.metadata(pack_to_device({"slot_mapping": layout.slot_mapping, **backend.arrays(layout)},
                                               device), layout)
        q, k_cache, v_cache = q.to(device), k_cache.to(device), v_cache.to(device)
        got = backend.forward(q, None, None, k_cache, v_cache, meta, None).float()
        want = paged_attention_reference(q.float(), k_cache.float(), v_cache.float(), cu.to(device),
                                         context.to(device), tables.to(device))
        diff = (got - want).abs()
        assert diff.max() <= 2e-2, f"max {diff.max():.3g} mean {diff.mean():.3g}"


def test_nf4_smollm2_on_gpu():
    """SmolLM2 in nf4 on the GPU: teacher-forced top-1 agreement with bf16 and the memory saved."""
    pytest.importorskip("bitsandbytes")
    from benchmarks.quant_quality import compare_quantization

    result = compare_quantization("default", "nf4", "bfloat16", device="cuda", new_tokens=32)
    print(result)
    assert result["top1_agreement"] >= 0.75, result
    assert result["linear_bytes"]["quantized"] < 0.4 * result["linear_bytes"]["reference"], result


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_deterministic_mode_gives_the_same_bits_however_a_sequence_ran_on_cuda(tiny_llama, dtype):
    """Issue 48 on a GPU: the batch-invariance scenarios of tests/engine/test_batch_invariance.py with the engine
    on CUDA (InvariantTritonBackend, 128-row tiles, deterministic cuBLAS); interpreted on the CPU they pass in
    tests/engine/test_triton_engine.py, here the GPU's own kernels are the question."""
    from tests.engine.test_batch_invariance import _all_runs

    differences = _all_runs(tiny_llama[0], dtype, deterministic=True)
    failed = {name: problems[:3] for name, problems in differences.items() if problems}
    assert not failed, f"batch-variant on CUDA in the deterministic mode: {failed}"
