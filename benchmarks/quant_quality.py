"""Quantisation quality and memory: an nf4/int8 engine against the unquantised one on fixed prompts.

For every prompt (rendered with the model's chat template) the reference engine (unquantised,
`--reference-dtype`, bf16 by default) writes a greedy continuation. Then both engines score the
same token sequence, teacher-forced, in one prefill each with every row's logits kept, and we
count the continuation positions where their top-1 next tokens agree. Free-running generation
would let one early difference change everything after it; teacher forcing compares the two models
position by position on identical inputs. Memory is the weight bytes as stored (packed 4-bit
weights and their quantisation constants counted), overall and for the language model's linears.

Shared by `dossier bench quant` and the slow test tests/engine/test_quantize.py.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import torch

from engine.core.config import EngineConfig
from engine.core.llm_engine import Engine
from engine.core.sampling_params import SamplingParams
from engine.core.scheduler import Chunk
from engine.core.sequence import Sequence
from engine.core.step_layout import build_layout
from models.quantize import weight_bytes

__all__ = ["PROMPTS", "compare_quantization", "sequence_logits"]

PROMPTS = [
    "What was the total revenue of the company in 2019, according to the annual report?",
    "Summarise the risk factors section of a 10-K filing in two sentences.",
    "The membership form asks for a name, an address and a fee. Which fee applies to students?",
    "Write a JSON tool call that searches for 'capital expenditure 2018'.",
    "Explain what a balance sheet shows, in simple words.",
    "The café menu lists soup at 4.50 and salad at 6.00. What do both cost together?",
    "Which page of a report usually holds the auditor's opinion?",
    "Translate 'net income decreased by 12 percent' into French.",
]


def sequence_logits(engine: Engine, token_ids: list[int]) -> torch.Tensor:
    """Teacher-forced logits (tokens, vocab) of every position of `token_ids`, in one prefill through the engine."""
    block_size = engine.config.block_size
    seq = Sequence(-1, block_size)
    seq.append(list(token_ids), list(range(len(token_ids))), len(token_ids))
    engine.block_manager.allocate(seq, len(token_ids))
    try:
        layout = build_layout([Chunk(SimpleNamespace(seq=seq), 0, len(token_ids), True)], block_size)
        layout.sample_rows = np.arange(len(token_ids), dtype=np.int64)  # keep every row's logits
        with torch.inference_mode():
            return engine.runner.forward_layout(layout).float().cpu()
    finally:
        engine.block_manager.release(seq)


def _sequences(engine: Engine, new_tokens: int) -> list[tuple[int, list[int]]]:
    """(prompt length, prompt + greedy continuation) for every prompt."""
    out = []
    for prompt in PROMPTS:
        with engine.open_session() as session:
            session.append_message("user", prompt)
            session.append_generation_prompt()
            start = session.num_tokens
            session.generate(SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
            out.append((start, session.token_ids))
    return out


def _linear_bytes(adapter) -> int:
    layers = getattr(adapter, "layers", None)
    return weight_bytes(layers) if layers is not None else 0


def compare_quantization(model: str = "default", quantization: str = "nf4", reference_dtype: str = "bfloat16",
                         device: str = "auto", new_tokens: int = 32, progress=None) -> dict:
    """Top-1 agreement and weight memory of `quantization` against the unquantised model.

    Args:
        model: "default", a local model directory or .gguf file (needs a tokenizer).
        quantization: "nf4" or "int8".
        reference_dtype: dtype of the unquantised reference and the quantised model's compute dtype.
        device: "cpu", "cuda" or "auto".
        new_tokens: continuation length per prompt, tokens (the compared positions).
        progress: optional callable(str) told what runs now.
    """
    say = progress or (lambda _msg: None)
    base = dict(device=device, dtype=reference_dtype, kv_cache_gib=0.25)
    say(f"loading {model} ({reference_dtype})")
    reference = Engine.from_pretrained(model, EngineConfig(**base))
    sequences = _sequences(reference, new_tokens)
    started = time.perf_counter()
    reference_logits = [sequence_logits(reference, ids) for _, ids in sequences]
    reference_s = time.perf_counter() - started
    reference_bytes, reference_linear = weight_bytes(reference.adapter), _linear_bytes(reference.adapter)
    del reference
    say(f"loading {model} ({quantization})")
    quantized = Engine.from_pretrained(model, EngineConfig(**base, quantization=quantization))
    started = time.perf_counter()
    quantized_logits = [sequence_logits(quantized, ids) for _, ids in sequences]
    quantized_s = time.perf_counter() - started
    agree = positions = 0
    worst = 0.0
    for (start, _ids), ref, got in zip(sequences, reference_logits, quantized_logits):
        rows = slice(start - 1, None)  # the rows predicting each continuation token
        agree += int((ref[rows].argmax(-1) == got[rows].argmax(-1)).sum())
        positions += ref[rows].shape[0]
        worst = max(worst, float((ref[rows] - got[rows]).abs().max()))
    quant_bytes, quant_linear = weight_bytes(quantized.adapter), _linear_bytes(quantized.adapter)
    return {
        "model": model, "quantization": quantization, "reference_dtype": reference_dtype,
        "device": str(quantized.runner.device), "prompts": len(PROMPTS), "positions": positions,
        "top1_agreement": round(agree / positions, 4), "max_abs_logit_diff": round(worst, 3),
        "weight_bytes": {"reference": reference_bytes, "quantized": quant_bytes},
        "linear_bytes": {"reference": reference_linear, "quantized": quant_linear},
        "memory_ratio": round(reference_bytes / quant_bytes, 3),
        "score_seconds": {"reference": round(reference_s, 2), "quantized": round(quantized_s, 2)},
    }
