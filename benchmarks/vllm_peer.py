"""The vLLM side of `dossier bench engine --vllm-python PY`: run in vLLM's own virtualenv and process.

It imports only the standard library and vllm, so it runs under a separate interpreter that has
vLLM installed (vLLM pins its own torch). It reads a plan written by `benchmarks/engine_sessions.py`
(the model directory, and for every turn the token ids each session appends), warms up as our side
does (two 600-token prompts), then replays the turns with prefix caching: each turn every session's
whole history goes in, `new_tokens` come out (end-of-sequence ignored) and are appended. Prints one
JSON line: {"vllm_s", "vllm_version", "tokens_generated", "sessions", "turns"}.

    PY benchmarks/vllm_peer.py plan.json
"""

import json
import sys
import time


def main() -> None:
    with open(sys.argv[1]) as handle:
        plan = json.load(handle)
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=plan["model"], enable_prefix_caching=True, skip_tokenizer_init=True, dtype=plan["dtype"],
              gpu_memory_utilization=plan.get("gpu_memory_utilization", 0.35), seed=0)
    new_tokens = plan["new_tokens"]
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, min_tokens=new_tokens, ignore_eos=True,
                            detokenize=False)
    warm = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, detokenize=False)
    llm.generate([TokensPrompt(prompt_token_ids=[11 + i] * 600) for i in range(2)], warm, use_tqdm=False)
    turns = plan["turns"]  # turns[t][s]: token ids session s appends before turn t
    histories: list[list[int]] = [[] for _ in turns[0]]
    generated = 0
    started = time.perf_counter()
    for appends in turns:
        for history, ids in zip(histories, appends):
            history.extend(ids)
        outputs = llm.generate([TokensPrompt(prompt_token_ids=list(h)) for h in histories], params, use_tqdm=False)
        for history, output in zip(histories, outputs):
            tokens = list(output.outputs[0].token_ids)
            history.extend(tokens)
            generated += len(tokens)
    elapsed = time.perf_counter() - started
    print(json.dumps({"vllm_s": round(elapsed, 3), "vllm_version": vllm.__version__, "tokens_generated": generated,
                      "sessions": len(histories), "turns": len(turns)}))


if __name__ == "__main__":
    main()
