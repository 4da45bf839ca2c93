"""`dossier bench quant`: dtypes and quantisations of one model against its float32 self, quality and speed.

For each variant (a dtype such as bfloat16, or a quantisation such as int4 / int8 / nf4 over the
float32 model) in one run, against the float32 reference loaded in the same process:

- top-1 agreement: the reference writes each fixed prompt's greedy continuation, then both score
  the same tokens teacher-forced (benchmarks/quant_quality.py) and every continuation position
  whose most likely next token matches counts;
- weights: bytes as stored, and the bytes one decode step reads per token (the packed weights of
  the linears and the output head; the embedding table is only gathered, and int4's dense prefill
  copy is not read at decode);
- speed: prefill tok/s of one and of 8 prompts of `prompt_tokens`, and decode tok/s at batch 1 and
  8, each after a warm-up, with the same threads;
- decode at batch 1 as a fraction of the memory-bandwidth bound: (bytes read per token ÷ a
  measured copy bandwidth) ÷ the measured time per token.

Absolute speeds are meaningful only on an idle machine; the ratios to float32 are the result.
"""

from __future__ import annotations

import random
import time

import torch

from benchmarks.quant_quality import _sequences, sequence_logits
from engine.core.config import QUANTIZATIONS, EngineConfig
from engine.core.llm_engine import Engine
from engine.core.sampling_params import SamplingParams
from engine.core.threads import set_torch_threads
from models.quantize import weight_bytes

__all__ = ["compare_variants", "copy_bandwidth", "decode_bytes_per_token"]

DTYPES = ("float32", "bfloat16", "float16")


def copy_bandwidth(gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes per second of a large tensor copy (each byte read once and written once), best of `repeats`."""
    source = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - started)
    return 2 * source.numel() * 4 / best


def decode_bytes_per_token(adapter) -> int:
    """Weight bytes one decode step reads per sequence: everything stored, less the embedding table (gathered one
    row at a time, unless tied to the head) and int4's dense prefill copies."""
    total = weight_bytes(adapter)
    embed = getattr(adapter, "embed_tokens", None)
    head = getattr(adapter, "lm_head", None)
    if embed is not None and head is not None:  # untied: the table is read only for the tokens fed in
        total -= embed.weight.numel() * embed.weight.element_size()
    for module in adapter.modules():
        dense = getattr(module, "dense", None)
        if isinstance(dense, torch.Tensor):
            total -= dense.numel() * dense.element_size()
    return total


def _engine(model: str, variant: str, threads: int, device: str) -> Engine:
    dtype, quantization = (variant, None) if variant in DTYPES else ("float32", variant)
    return Engine.from_pretrained(model, EngineConfig(device=device, dtype=dtype, quantization=quantization,
                                                      kv_cache_gib=1.0, cpu_threads=threads))


def _timed(engine: Engine, sessions: int, prompt_tokens: int, new_tokens: int, seed: int) -> dict:
    """Run `sessions` prompts to completion; the engine's own phase clocks over the run (prefill / decode steps)."""
    rng = random.Random(seed)
    vocab = engine.adapter.shape.vocab_size
    for _ in range(sessions):
        session = engine.open_session()
        session.append([rng.randrange(100, vocab - 100) for _ in range(prompt_tokens)])
        engine.submit(session, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
    before = dict(engine.phases)
    engine.run_until_idle()
    return {key: engine.phases[key] - before[key] for key in before}


def _speed(engine: Engine, prompt_tokens: int, decode_tokens: int) -> dict:
    _timed(engine, 2, 64, 4, seed=0)  # warm-up: kernels, numba, allocator
    out = {}
    for batch in (1, 8):
        phases = _timed(engine, batch, prompt_tokens, 1, seed=batch)
        out[f"prefill_tok_s_batch{batch}"] = round(batch * prompt_tokens / phases["prefill_time_s"], 1)
        phases = _timed(engine, batch, 16, decode_tokens + 1, seed=10 + batch)
        out[f"decode_tok_s_batch{batch}"] = round(phases["decode_tokens"] / phases["decode_time_s"], 2)
    return out


def compare_variants(model: str = "default", variants: tuple[str, ...] = ("bfloat16", "int4", "int8"),
                     new_tokens: int = 32, prompt_tokens: int = 256, decode_tokens: int = 32, threads: int = 2,
                     device: str = "cpu", speed: bool = True, progress=None) -> dict:
    """Every variant against the float32 model: top-1 agreement, memory, speed, bandwidth fraction.

    Args:
        model: "default", a packaged model, a local model directory or .gguf file.
        variants: dtypes (bfloat16, float16) and quantisations (int4, int8, nf4) of the float32 model.
        new_tokens: greedy continuation per prompt whose positions are compared.
        prompt_tokens, decode_tokens: sizes of the speed runs.
        threads: torch threads of every engine (fixed, the same for all).
        speed: False measures agreement and memory only.
        progress: optional callable(str).
    """
    bad = [v for v in variants if v not in DTYPES + QUANTIZATIONS or v == "float32"]
    if bad:
        from tools.errors import DossierError

        raise DossierError(f"variants {bad} are not dtypes ({', '.join(DTYPES[1:])}) or quantisations "
                           f"({', '.join(QUANTIZATIONS)})")
    say = progress or (lambda _msg: None)
    threads = set_torch_threads(threads)
    bandwidth = copy_bandwidth() if speed else None
    rows = []
    say(f"loading {model} (float32 reference)")
    reference = _engine(model, "float32", threads, device)
    sequences = _sequences(reference, new_tokens)
    reference_logits = [sequence_logits(reference, ids) for _, ids in sequences]
    rows.append(_row(reference, "float32", None, None, bandwidth, speed, prompt_tokens, decode_tokens, say))
    del reference
    for variant in variants:
        say(f"loading {model} ({variant})")
        engine = _engine(model, variant, threads, device)
        agree = positions = 0
        for (start, ids), ref in zip(sequences, reference_logits):
            got = sequence_logits(engine, ids)
            rows_predicting = slice(start - 1, None)
            agree += int((ref[rows_predicting].argmax(-1) == got[rows_predicting].argmax(-1)).sum())
            positions += ref[rows_predicting].shape[0]
        rows.append(_row(engine, variant, agree, positions, bandwidth, speed, prompt_tokens, decode_tokens, say))
        del engine
    base = rows[0]
    for row in rows[1:]:
        if speed:
            row["decode_batch1_vs_float32"] = round(row["decode_tok_s_batch1"] / base["decode_tok_s_batch1"], 2)
            row["prefill_batch8_vs_float32"] = round(row["prefill_tok_s_batch8"] / base["prefill_tok_s_batch8"], 2)
        row["memory_vs_float32"] = round(row["weight_bytes"] / base["weight_bytes"], 3)
    return {"model": model, "threads": threads, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 2) if bandwidth else None,
            "prompts": len(sequences), "rows": rows}


def _row(engine: Engine, variant: str, agree: int | None, positions: int | None, bandwidth: float | None,
         speed: bool, prompt_tokens: int, decode_tokens: int, say) -> dict:
    per_token = decode_bytes_per_token(engine.adapter)
    row = {"variant": variant, "dtype": str(engine.adapter.dtype).removeprefix("torch."),
           "top1_agreement": None if agree is None else round(agree / positions, 4), "positions": positions,
           "weight_bytes": weight_bytes(engine.adapter), "decode_bytes_per_token": per_token}
    if speed:
        say(f"timing {variant}")
        row.update(_speed(engine, prompt_tokens, decode_tokens))
        bound = bandwidth / per_token  # tokens/s if a decode step did nothing but stream its weights once
        row["decode_bandwidth_bound_tok_s"] = round(bound, 2)
        row["decode_batch1_fraction_of_bound"] = round(row["decode_tok_s_batch1"] / bound, 3)
    return row
