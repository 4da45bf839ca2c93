"""`dossier bench engine --vllm-python PY`: the plan handed to vLLM's own process, and its report read back.

vLLM needs a GPU, so the child process here imports a stand-in `vllm` package that records every
prompt it is given and answers with fixed tokens; the test checks what a real vLLM would have been
asked (the saved model, each turn's histories growing by our appended tokens plus its own replies)
and that the figures come back. vLLM itself runs in scripts/gpu_check.sh on a lent GPU.
"""

import json
import sys
import textwrap

from benchmarks.engine_sessions import Workload, run_benchmark
from engine.core.config import EngineConfig

STAND_IN = textwrap.dedent('''
    import json, os
    __version__ = "stand-in"
    LOG = os.environ["VLLM_STAND_IN_LOG"]

    class SamplingParams:
        def __init__(self, max_tokens=16, **kwargs):
            self.max_tokens = max_tokens
            self.kwargs = kwargs

    class _Out:
        def __init__(self, ids):
            self.token_ids = ids

    class _Result:
        def __init__(self, ids):
            self.outputs = [_Out(ids)]

    class LLM:
        def __init__(self, model, **kwargs):
            assert os.path.isfile(os.path.join(model, "config.json")), model
            assert kwargs["enable_prefix_caching"] and kwargs["skip_tokenizer_init"]
            self.calls = []

        def generate(self, prompts, params, use_tqdm=False):
            with open(LOG, "a") as handle:
                handle.write(json.dumps([p["prompt_token_ids"] for p in prompts]) + "\\n")
            return [_Result([7] * params.max_tokens) for _ in prompts]
''')


def test_vllm_runs_in_its_own_process_on_our_plan(tmp_path, monkeypatch):
    package = tmp_path / "stand_in" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STAND_IN)
    (package / "inputs.py").write_text("def TokensPrompt(prompt_token_ids):\n    return {'prompt_token_ids': prompt_token_ids}\n")
    log = tmp_path / "prompts.jsonl"
    monkeypatch.setenv("VLLM_STAND_IN_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "stand_in"))
    workload = Workload(sessions=3, turns=2, tool_tokens=12, new_tokens=4)
    result = run_benchmark("llama-tiny", workload, EngineConfig(num_kv_blocks=256, block_size=16),
                           naive_sessions=1, vllm_python=sys.executable)
    assert result.get("vllm_version") == "stand-in", result
    assert result["tokens_generated"] == 3 * 2 * 4 and result["vllm_s"] >= 0 and "ratio_vs_vllm" in result
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    warm_up, first, second = calls
    assert len(warm_up) == 2 and all(len(p) == 600 for p in warm_up)
    assert len(first) == len(second) == 3
    for before, after in zip(first, second):  # turn 2 = turn 1's prompt + vLLM's reply + our 12 tool tokens
        assert after[: len(before)] == before and after[len(before): len(before) + 4] == [7] * 4
        assert len(after) == len(before) + 4 + 12


def test_vllm_python_reports_what_is_missing():
    workload = Workload(sessions=1, turns=1, tool_tokens=4, new_tokens=2)
    result = run_benchmark("llama-tiny", workload, EngineConfig(num_kv_blocks=64, block_size=16),
                           naive_sessions=1, vllm_python="/nonexistent/python")
    assert "no interpreter at /nonexistent/python" in result["vllm"]
