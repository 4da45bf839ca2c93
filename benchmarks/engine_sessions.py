"""The engine benchmark: an agent-like workload run by Dossier's engine, its Hugging Face peers and its ablations.

Workload (seeded): S sessions x T turns. Turn 1 appends a system prompt with a tool
schema (identical in every session) and a question; each later turn appends ~N tokens
of tool output (page text). Every turn generates a fixed number of tokens (greedy, stop
tokens masked until then) so every system does the same work.

- Dossier: all sessions in one engine; each turn appends to every session, submits
  all, and steps until all finish (what the rollout runner does with instant tools).
- Peers (`benchmarks/engine_peers.py`): HF `generate` (a) at batch 1 on the whole history,
  (b) at batch 1 keeping each session's KV cache, (c) batched with left padding; run on a
  subset of sessions, their time scaled to all.
- Ablations: Dossier with one sequence per step (interleaved, on the subset), and with
  prefix caching off (all sessions, after the main pass: two full KV pools would not fit).

All systems alternate turn by turn in one process (`benchmarks/engine_compare.py`), so a
change of load on a shared machine affects them alike; each one's time is the sum of its turns.
- vLLM (optional, GPU): the same histories through `vllm.LLM` with prefix caching.

Shared by `dossier bench engine` and `benchmarks/bench_engine.py`.
"""

import random
import time
from dataclasses import dataclass, replace

import torch

from engine.core.config import EngineConfig
from engine.core.llm_engine import Engine
from engine.core.sampling_params import SamplingParams

__all__ = ["Workload", "run_benchmark"]

SYSTEM_PROMPT = (
    "You are a document agent. You answer questions about a collection of PDF reports by calling tools. "
    "Reply with exactly one JSON tool call per turn.\n\nTools:\n"
    '{"name": "search", "description": "BM25 search over the pages of every document", '
    '"parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}\n'
    '{"name": "view_page", "description": "Read the text of one page", "parameters": {"type": "object", '
    '"properties": {"document": {"type": "string"}, "page": {"type": "integer", "minimum": 1}}, '
    '"required": ["document", "page"]}}\n'
    '{"name": "answer", "description": "Give the final answer with the pages that support it", '
    '"parameters": {"type": "object", "properties": {"answer": {"type": "string"}, "citations": {"type": "array", '
    '"items": {"type": "object", "properties": {"document": {"type": "string"}, "page": {"type": "integer"}}}}}, '
    '"required": ["answer", "citations"]}}'
)
WORDS = (
    "revenue income operating net profit margin segment quarter fiscal year million billion total assets liabilities "
    "equity cash flow dividend share earnings growth decline compared increase decrease percent report annual "
    "company subsidiary market customers products services cost expenses tax interest debt capital investment "
    "risk management board directors audit statement balance sheet note table page figure region europe asia "
    "america sales volume price guidance outlook strategy acquisition"
).split()


@dataclass(slots=True)
class Workload:
    sessions: int = 32  # concurrent agent episodes
    turns: int = 6  # model calls per episode
    tool_tokens: int = 300  # tokens of tool output appended before every turn after the first
    new_tokens: int = 30  # tokens generated per turn (fixed)
    seed: int = 0


def build_plan(engine: Engine, workload: Workload) -> list[list[list[tuple]]]:
    """Per session, per turn, the appends before generating: ("message", role, text), ("prompt",) or ("tokens", ids)."""
    rng = random.Random(workload.seed)
    vocab = engine.adapter.shape.vocab_size
    processor = engine.processor
    shared_prefix = [rng.randrange(10, vocab) for _ in range(256)]
    plan = []
    for session in range(workload.sessions):
        turns = []
        for turn in range(workload.turns):
            if processor is None:  # no tokenizer (random-weight shapes): token ids only
                ids = shared_prefix + [rng.randrange(10, vocab) for _ in range(32)] if turn == 0 else \
                    [rng.randrange(10, vocab) for _ in range(workload.tool_tokens)]
                turns.append([("tokens", ids)])
            elif turn == 0:
                question = f"Question {session}: what was the total {rng.choice(WORDS)} of the company in {2010 + session % 14}?"
                turns.append([("message", "system", SYSTEM_PROMPT), ("message", "user", question), ("prompt",)])
            else:
                turns.append([("message", "tool", _page_text(processor, rng, workload.tool_tokens)), ("prompt",)])
        plan.append(turns)
    return plan


def _page_text(processor, rng: random.Random, tokens: int) -> str:
    words: list[str] = [f"Page {rng.randrange(1, 200)} of report-{rng.randrange(100)}.pdf:"]
    while len(processor.encode(" ".join(words))) < tokens:
        words.extend(rng.choice(WORDS) if rng.random() > 0.15 else f"{rng.randrange(10, 9999)}" for _ in range(10))
    return " ".join(words)


def _sampling(workload: Workload) -> SamplingParams:
    return SamplingParams(max_new_tokens=workload.new_tokens, min_new_tokens=workload.new_tokens)


class EngineLoop:
    """Dossier's side: every session in one engine; a turn appends to all, submits all, steps until done."""

    label = "dossier"

    def __init__(self, engine: Engine, workload: Workload, plan) -> None:
        self.engine, self.workload, self.plan = engine, workload, plan
        self.sessions = [engine.open_session() for _ in range(workload.sessions)]
        self.outputs: list[list[list[int]]] = [[] for _ in self.sessions]

    def run_turn(self, turn: int) -> float:
        """Run one turn of every session; return its wall time in seconds."""
        started = time.perf_counter()
        requests = []
        for session, steps in zip(self.sessions, self.plan):
            for op in steps[turn]:
                if op[0] == "message":
                    session.append_message(op[1], op[2])
                elif op[0] == "prompt":
                    session.append_generation_prompt()
                elif op[0] == "image":  # a page image without a chat template (benchmark_images.py)
                    session.append_segment(self.engine.adapter.vision.image_segment(op[1]))
                else:
                    session.append(op[1])
            requests.append(self.engine.submit(session, _sampling(self.workload)))
        self.engine.run_until_idle()
        for outputs, request in zip(self.outputs, requests):
            outputs.append(request.wait().output_token_ids)
        return time.perf_counter() - started

    def close(self) -> None:
        for session in self.sessions:
            session.close()


def hf_reference_model(model: str, engine: Engine):
    """The peer: the same weights as a transformers model (the family's reference class)."""
    from models.loading import all_shapes, resolve_model_dir

    device = next(engine.adapter.parameters()).device
    dtype = engine.adapter.dtype
    if model in all_shapes():
        source = engine.adapter
        if engine.config.quantization:  # the peer runs the unquantised weights: the same seeded shape, rebuilt
            from models.loading import load_adapter

            source = load_adapter(model, device=device.type, dtype=dtype)
        with torch.device(device):
            hf_model = engine.adapter.family.reference()(engine.adapter.config).to(dtype)
        missing, unexpected = hf_model.load_state_dict(source.hf_state_dict(), strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
        hf_model.tie_weights()
        return hf_model.eval()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(resolve_model_dir(model), dtype=dtype).to(device).eval()


PEERS = ("naive", "kv_cache", "padded")


def run_benchmark(
    model: str = "default",
    workload: Workload | None = None,
    config: EngineConfig | None = None,
    naive_sessions: int | None = None,
    with_vllm: bool = False,
    progress=None,
    peers: tuple[str, ...] = PEERS,
    ablations: bool = True,
    padded_batch: int = 4,
    vllm_python: str | None = None,
) -> dict:
    """Run Dossier, its Hugging Face peers and its own ablations on the same workload; return the figures.

    Args:
        model: "default", a local model, or a shape name (random weights).
        workload: sessions, turns, tokens per tool output and per reply.
        config: engine configuration (defaults to EngineConfig()).
        naive_sessions: sessions the peers and the one-sequence ablation run (their time is linear in
            sessions and is scaled to all); None runs all of them.
        with_vllm: also run vLLM with prefix caching on the same histories (GPU, vllm installed).
        progress: optional callable(str) told what runs now.
        peers: which HF peers to run: "naive" (a), "kv_cache" (b), "padded" (c).
        ablations: also run Dossier with prefix caching off (after the main pass, all sessions) and one
            sequence at a time (interleaved, on the measured sessions).
        padded_batch: sessions per `generate` call of the padded peer.
        vllm_python: run vLLM instead in this interpreter (its own virtualenv), in its own process with
            its own warm-up (`benchmarks/vllm_peer.py`); random-weight shapes only.
    """
    from benchmarks.engine_compare import compare, minus, row, timed_turns
    from benchmarks.engine_peers import KvCacheLoop, NaiveLoop, PaddedLoop

    unknown = set(peers) - set(PEERS)
    if unknown:
        from tools.errors import DossierError

        raise DossierError(f"unknown peer(s) {', '.join(sorted(unknown))}; choose from {', '.join(PEERS)}")
    workload = workload or Workload()
    config = config or EngineConfig()
    say = progress or (lambda _msg: None)
    say(f"loading {model}")
    engine = Engine.from_pretrained(model, config)
    plan = build_plan(engine, workload)
    measured = min(naive_sessions or workload.sessions, workload.sessions)
    if progress is None:  # machine-readable runs show no progress bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    hf_model = hf_reference_model(model, engine) if peers else None
    say("warming up")
    _warm_up(engine)
    if hf_model is not None:
        _warm_up_hf(hf_model)
    subset = replace(workload, sessions=measured)
    loops: dict = {}
    for key in peers:
        if key == "naive":
            loops[key] = NaiveLoop(hf_model, engine, workload, plan, measured)
        elif key == "kv_cache":
            loops[key] = KvCacheLoop(hf_model, engine, workload, plan, measured)
        else:
            loops[key] = PaddedLoop(hf_model, engine, workload, plan, measured, padded_batch)
    if ablations:  # the same weights, its own small KV pool, one sequence per forward step
        pool_gib = engine.runner.num_blocks * engine.runner.per_block / 2**30  # what the main engine got
        one = Engine(engine.adapter, replace(config, max_num_seqs=1, num_kv_blocks=None,
                                             kv_cache_gib=pool_gib * measured / workload.sessions + 0.05))
        _warm_up(one)
        loops["one_seq"] = EngineLoop(one, subset, plan[:measured])
        loops["one_seq"].label = "dossier, one sequence per forward step (no batching across sessions)"
    say(f"{workload.sessions} sessions x {workload.turns} turns; peers on {measured} sessions, turns interleaved")
    ours_loop = EngineLoop(engine, workload, plan)
    result = compare(engine, model, workload, ours_loop, loops, measured, say)
    ours_loop.close()
    if "one_seq" in loops:
        loops["one_seq"].close()
        del loops["one_seq"], one
    if with_vllm:
        say("vLLM with prefix caching")
        result.update(run_vllm(model, engine, workload, plan, result["dossier_s"]))
    if vllm_python:
        say(f"vLLM with prefix caching, in its own process ({vllm_python})")
        result.update(run_vllm_process(vllm_python, model, engine, workload, plan, result["dossier_s"]))
    if ablations:
        say("dossier with prefix caching off (all sessions, after the main pass)")
        adapter, reference = engine.adapter, ours_loop.outputs
        del engine, ours_loop  # free the main KV pool before the ablation allocates its own
        import gc

        gc.collect()
        off = Engine(adapter, replace(config, enable_prefix_caching=False))
        _warm_up(off)
        loop = EngineLoop(off, workload, plan)
        before = replace(off.counters)
        seconds = timed_turns(loop, workload.turns)
        prefilled = minus(off.counters, before).tokens_prefilled
        result["rows"].append(row("no_prefix_cache", "dossier, prefix caching off (run after the main pass)", seconds,
                                  workload.sessions, workload.sessions, prefilled, loop.outputs, reference))
        loop.close()
        from benchmarks.engine_compare import add_ratios

        add_ratios(result)
    return result


def _warm_up(engine: Engine) -> None:
    """A prefill and a batched decode of realistic sizes, so one-time costs (allocator, kernels) are paid."""
    sessions = [engine.open_session() for _ in range(2)]
    for i, session in enumerate(sessions):
        session.append([11 + i] * 600)
        engine.submit(session, SamplingParams(max_new_tokens=4, ignore_eos=True))
    engine.run_until_idle()
    for session in sessions:
        session.close()


def _warm_up_hf(hf_model) -> None:
    device = next(hf_model.parameters()).device
    ids = torch.full((1, 600), 11, device=device)
    with torch.inference_mode():
        hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False, pad_token_id=0)


def run_vllm_process(python: str, model: str, engine: Engine, workload: Workload, plan, ours_s: float,
                     timeout_s: float = 900) -> dict:
    """vLLM (prefix caching) on the same appended token ids, run by `python` in its own process.

    The plan holds token ids only, so this takes the random-weight shapes (no tokenizer); vLLM writes
    its own `new_tokens` each turn, as in `run_vllm`. Returns {"vllm_s", "ratio_vs_vllm", ...} or
    {"vllm": reason} when it could not run.
    """
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from models.loading import all_shapes

    if model not in all_shapes():
        return {"vllm": f"--vllm-python takes a random-weight shape ({', '.join(all_shapes())}); use --vllm for {model!r}"}
    if not Path(python).is_file():
        return {"vllm": f"no interpreter at {python}: create vLLM's virtualenv first (python -m venv; pip install vllm)"}
    folder = Path(tempfile.mkdtemp(prefix="dossier-vllm-"))
    hf_reference_model(model, engine).save_pretrained(folder / "model")
    turns = [[[token for op in steps[turn] for token in op[1]] for steps in plan] for turn in range(workload.turns)]
    spec = {"model": str(folder / "model"), "dtype": str(engine.runner.dtype).removeprefix("torch."),
            "new_tokens": workload.new_tokens, "turns": turns}
    (folder / "plan.json").write_text(json.dumps(spec))
    script = Path(__file__).with_name("vllm_peer.py")
    try:
        proc = subprocess.run([python, str(script), str(folder / "plan.json")], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"vllm": f"vLLM did not finish within {timeout_s:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"vllm": f"vLLM failed (exit {proc.returncode}): {proc.stderr[-800:]}"}
    peer = json.loads(lines[-1])
    return {**peer, "ratio_vs_vllm": round(peer["vllm_s"] / ours_s, 3)}


def run_vllm(model: str, engine: Engine, workload: Workload, plan, ours_s: float) -> dict:
    """vLLM (prefix caching on) re-sent the whole histories each turn; GPU only. Untested on CPU machines."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return {"vllm": "not installed (pip install 'dossier[vllm]')"}
    import tempfile

    from vllm import LLM
    from vllm import SamplingParams as VllmSampling
    from vllm.inputs import TokensPrompt

    from models.loading import all_shapes, resolve_model_dir

    if model in all_shapes():
        folder = tempfile.mkdtemp(prefix="dossier-vllm-")
        hf_reference_model(model, engine).save_pretrained(folder)
    else:
        folder = str(resolve_model_dir(model))
    llm = LLM(model=folder, enable_prefix_caching=True, skip_tokenizer_init=engine.processor is None,
              dtype=str(engine.runner.dtype).removeprefix("torch."), gpu_memory_utilization=0.4)
    params = VllmSampling(temperature=0.0, max_tokens=workload.new_tokens, min_tokens=workload.new_tokens,
                          stop_token_ids=sorted(engine.stop_token_ids) or None, detokenize=False)
    histories = [[] for _ in plan]
    started = time.perf_counter()
    processor = engine.processor
    for turn in range(workload.turns):
        for history, steps in zip(histories, plan):
            for op in steps[turn]:
                if op[0] == "message":
                    history += processor.render_message(op[1], op[2], first=not history).token_ids
                elif op[0] == "prompt":
                    history += processor.generation_prompt().token_ids
                else:
                    history += op[1]
        outs = llm.generate([TokensPrompt(prompt_token_ids=list(h)) for h in histories], params, use_tqdm=False)
        for history, out in zip(histories, outs):
            history += list(out.outputs[0].token_ids)
            if processor is not None and turn + 1 < workload.turns:
                history += processor.close_turn(list(out.outputs[0].token_ids)).token_ids
    vllm_s = time.perf_counter() - started
    return {"vllm_s": round(vllm_s, 3), "ratio_vs_vllm": round(vllm_s / ours_s, 3)}
