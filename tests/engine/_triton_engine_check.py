"""Run by tests/engine/test_triton_engine.py in a subprocess with TRITON_INTERPRET=1.

The engine with attention_backend="triton" (our paged kernels, interpreted on the CPU) on a tiny
random Llama, against HF `generate`: a batch of prompts of different lengths in chunked prefill,
then a second turn continuing every session from its cache (prefix blocks read by the varlen
kernel), decode steps through the split-K kernel; once eagerly and once through the decode-graph
buffers (padding rows included); then a tiny Gemma-3, whose sliding-window layer reads a pool of its own
(null blocks before each window, engine/core/window_blocks.py), eagerly; then a tiny Gemma 4 (local and
global heads of different sizes in the two pools, KV-sharing layers reading another layer's cache), eagerly.
Prints one JSON object.
"""

import json
import os
import sys
import tempfile

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from engine import Engine, EngineConfig, SamplingParams  # noqa: E402
from engine.core.cuda_graphs import DecodeGraphs  # noqa: E402
from tests.engine.conftest import build_model, build_tokenizer, hf_greedy, random_prompt  # noqa: E402


def run(folder, hf, graphs: bool) -> dict:
    config = EngineConfig(block_size=4, num_kv_blocks=128, attention_backend="triton", max_num_batched_tokens=24,
                          dtype="float32")  # as the HF reference; "auto" is bf16 on an avx512_bf16 CPU
    engine = Engine.from_pretrained(folder, config)
    if graphs:
        engine.runner.graphs = DecodeGraphs(engine.runner, 4, capture=False)
    sessions = [engine.open_session() for _ in range(3)]
    matches = total = 0
    for turn in range(2):
        requests, histories = [], []
        for i, session in enumerate(sessions):
            session.append(random_prompt(5 + 6 * i, seed=30 * turn + i))
            histories.append(session.token_ids)
            requests.append(session.submit(SamplingParams(max_new_tokens=5, ignore_eos=True)))
        engine.run_until_idle()
        for request, history in zip(requests, histories):
            total += 1
            matches += request.output_token_ids == hf_greedy(hf, history, 5, None)
    stats = engine.stats()
    return {"backend": stats["attention_backend"], "sessions_matching": matches, "sessions": total,
            "cached_tokens": engine.counters.tokens_cached,
            "graph_steps": engine.runner.graphs.steps if graphs else 0,
            "window_blocks_held": max(stats["window_blocks"]["held_by_session"].values()) if "window_blocks" in stats
            else None}


def main() -> None:
    folder = tempfile.mkdtemp(prefix="triton-engine-")
    hf = build_model("llama")
    hf.save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    report = {"eager": run(folder, hf, graphs=False), "graphs": run(folder, hf, graphs=True)}
    for family, key in (("gemma3", "window"), ("gemma4", "gemma4")):
        folder = tempfile.mkdtemp(prefix=f"triton-engine-{family}-")
        hf = build_model(family)
        hf.save_pretrained(folder)
        build_tokenizer().save_pretrained(folder)
        report[key] = run(folder, hf, graphs=False)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
