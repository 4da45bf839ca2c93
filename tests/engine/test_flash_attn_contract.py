"""The flash_attn backend's calls, checked on the CPU against flash-attn's documented contract.

flash-attn has no CPU build, so a stand-in module implements the two functions we call as their
docstrings define them (paged K/V through `block_table`, int32 lengths, causal aligned to the end
of each key sequence, `window_size=(left, right)`), with our float32 reference. The engine run
through the backend must then equal HF `generate`: this checks the arguments we build (cu_seqlens_k,
cache_seqlens, int32 tables, the decode/varlen split). The real kernels run in the GPU check
(tests marked gpu).
"""

import sys
import types

import torch

from engine import Engine, EngineConfig, SamplingParams
from engine.core.attention import make_backend
from kernels.paged_attention import paged_attention_reference
from tests.engine.conftest import hf_greedy, random_prompt

CALLS = {"varlen": 0, "kvcache": 0}


def _window(window_size) -> int:
    left, right = window_size
    assert right in (-1, 0), "the engine never looks ahead"
    return 0 if left == -1 else left + 1


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                           window_size=(-1, -1), block_table=None, **unused):
    assert not unused, unused
    assert causal and block_table is not None
    assert cu_seqlens_q.dtype == cu_seqlens_k.dtype == block_table.dtype == torch.int32
    context = cu_seqlens_k.diff()
    assert max_seqlen_q == int(cu_seqlens_q.diff().max()) and max_seqlen_k == int(context.max())
    assert k.shape[0] > int(block_table.max()), "block ids index the cache's first dimension"
    CALLS["varlen"] += 1
    return paged_attention_reference(q, k, v, cu_seqlens_q, context, block_table, window=_window(window_size))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, causal=False,
                            window_size=(-1, -1), **unused):
    assert not unused, unused
    assert k is None and v is None, "the engine stores K/V itself before attending"
    assert q.dim() == 4 and q.shape[1] == 1, "(batch, 1, heads, head_dim)"
    assert cache_seqlens.dtype == block_table.dtype == torch.int32 and causal
    CALLS["kvcache"] += 1
    cu = torch.arange(q.shape[0] + 1, dtype=torch.int32)
    out = paged_attention_reference(q[:, 0], k_cache, v_cache, cu, cache_seqlens, block_table,
                                    window=_window(window_size))
    return out.unsqueeze(1)


def test_engine_through_the_flash_attn_backend_matches_hf(tiny_llama, monkeypatch):
    stand_in = types.ModuleType("flash_attn")
    stand_in.flash_attn_varlen_func = flash_attn_varlen_func
    stand_in.flash_attn_with_kvcache = flash_attn_with_kvcache
    monkeypatch.setitem(sys.modules, "flash_attn", stand_in)
    folder, hf = tiny_llama
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=256,
                                                               max_num_batched_tokens=20))
    runner = engine.runner
    runner.attention = make_backend("flash_attn", engine.adapter.shape, 4, runner.device, runner.dtype)
    sessions = [engine.open_session() for _ in range(4)]
    for turn in range(2):
        requests, histories = [], []
        for i, session in enumerate(sessions):
            session.append(random_prompt(4 + 5 * i, seed=60 + 10 * turn + i))
            histories.append(session.token_ids)
            requests.append(session.submit(SamplingParams(max_new_tokens=6, ignore_eos=True)))
        engine.run_until_idle()
        for i, (request, history) in enumerate(zip(requests, histories)):
            assert request.output_token_ids == hf_greedy(hf, history, 6, None), f"session {i} turn {turn + 1}"
    assert CALLS["varlen"] > 0 and CALLS["kvcache"] > 0, CALLS
