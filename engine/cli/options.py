"""Options shared by several commands, defined once (STYLE.md: CLI)."""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["OutputFormat", "FormatOpt", "CorpusOpt", "DtypeOpt", "QuantizationOpt", "emit_json", "set_threads"]


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

DtypeOpt = Annotated[
    str,
    typer.Option("--dtype", help="Weights, activations and KV cache: auto (bfloat16 on a GPU and on a CPU with "
                                 "avx512_bf16/amx_bf16, float32 on other CPUs; `dossier version` says which here), "
                                 "float32, bfloat16 or float16."),
]
QuantizationOpt = Annotated[
    str | None,
    typer.Option("--quantization", help="Weight-only quantisation of the language model's linear layers: int4 (CPU: "
                                        "torch's native kernel, groups of 128, for decode steps; prefill keeps a dense "
                                        "copy), int8 or nf4 (bitsandbytes; needs pip install 'dossier[quant]'). "
                                        "Vision towers, embeddings and the output head keep the model dtype."),
]


def emit_json(obj) -> None:
    """Print one JSON document on stdout."""
    import json
    import sys

    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def set_threads(threads: int) -> None:
    """Use `threads` CPU threads in torch and in numba's kernels (the CPU attention), as --threads promises."""
    import torch

    torch.set_num_threads(threads)
    try:
        import numba
    except ImportError:
        return
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
