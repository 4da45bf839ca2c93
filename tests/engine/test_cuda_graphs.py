"""The decode-graph path on the CPU: the same static buffers, padding and forward the CUDA graphs replay.

`DecodeGraphs(capture=False)` runs `forward(bucket)` directly, the function a CUDA graph captures,
so these tests check its logic (bucketing, padding rows parked in the scratch block, metadata over
the static buffers) against HF `generate` and against the plain eager step.
"""

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from engine.core.cuda_graphs import DecodeGraphs, batch_buckets
from engine.core.step_layout import build_layout
from tests.engine.conftest import hf_greedy, random_prompt


def test_buckets():
    assert batch_buckets(1) == [1]
    assert batch_buckets(8) == [1, 2, 4, 8]
    assert batch_buckets(40) == [1, 2, 4, 8, 16, 32, 40]
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]


def graph_engine(folder, backend: str, max_batch: int) -> Engine:
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=256,
                                                               attention_backend=backend))
    engine.runner.graphs = DecodeGraphs(engine.runner, max_batch, capture=False)
    return engine


@pytest.mark.parametrize("backend", ["sdpa", "numba"])
def test_graph_decode_path_matches_hf(tiny_llama, backend):
    """Five sessions in bucket 8 (three padding rows), two turns; then a batch too big for the graphs."""
    folder, hf = tiny_llama
    engine = graph_engine(folder, backend, max_batch=8)
    sessions = [engine.open_session() for _ in range(5)]
    for turn in range(2):
        requests, histories = [], []
        for i, session in enumerate(sessions):
            session.append(random_prompt(6 + 3 * i, seed=10 * turn + i))
            histories.append(session.token_ids)
            requests.append(session.submit(SamplingParams(max_new_tokens=8, ignore_eos=True)))
        engine.run_until_idle()
        for i, (request, history) in enumerate(zip(requests, histories)):
            assert request.output_token_ids == hf_greedy(hf, history, 8, None), f"session {i} turn {turn + 1}"
    graphs = engine.runner.graphs
    assert graphs.steps >= 2 * 7, "decode steps did not go through the static buffers"
    scratch = engine.runner.scratch_block
    assert engine.runner.k_cache[:, scratch].abs().sum() > 0, "padding rows should have written to the scratch block"
    assert all(scratch not in s.seq.block_table for s in sessions)
    engine.block_manager.check_invariants()
    steps = graphs.steps
    more = [engine.open_session() for _ in range(5)]  # 10 decoding sequences > 8: eager steps
    for i, session in enumerate(more):
        session.append(random_prompt(5, seed=90 + i))
        session.submit(SamplingParams(max_new_tokens=3, ignore_eos=True))
    for session in sessions:
        session.append(random_prompt(3, seed=7))
        session.submit(SamplingParams(max_new_tokens=3, ignore_eos=True))
    engine.run_until_idle()
    assert graphs.steps == steps, "a batch above the largest bucket must run eagerly"


def test_graph_step_equals_eager_step(tiny_llama):
    """One decode step of three sequences: graph path (bucket 4) and eager path give the same logits."""
    folder, _ = tiny_llama
    engine = graph_engine(folder, "numba", max_batch=4)
    sessions = [engine.open_session() for _ in range(3)]
    for i, session in enumerate(sessions):
        session.append(random_prompt(9 + i, seed=40 + i))
        session.submit(SamplingParams(max_new_tokens=2, ignore_eos=True))
    engine.step()  # the prefills
    chunks, _ = engine.scheduler.schedule(engine._step + 1)  # the next step: three decode tokens
    layout = build_layout(chunks, engine.config.block_size)
    assert engine.runner.graphs.can_run(layout)
    with torch.inference_mode():
        eager = engine.runner.forward_layout(layout).clone()
        graphed = engine.runner.graphs.run(layout).clone()
    assert graphed.shape == eager.shape == (3, engine.adapter.shape.vocab_size)
    diff = (graphed - eager).abs()
    assert diff.max() < 1e-4, f"max diff {diff.max():.2e}, mean {diff.mean():.2e}"
