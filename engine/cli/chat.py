"""`dossier chat`: talk to a model through the engine, one session kept across turns.

A quick interactive check that a model loads and answers; every reply is followed by
what the turn cost (tokens prefilled, served from the session's cache, generated).
Lines starting with "/" are commands: /reset starts a new session, /stats prints the
engine counters, /exit (or end of input) quits.
"""

import sys
import time
from typing import Annotated

import typer

from engine.cli.options import (DEVICE, DTYPE, GPU_MEMORY_UTILIZATION, KV_CACHE_GIB, MODEL, QUANTIZATION, THREADS,
                                DeviceOpt, DtypeOpt, GpuMemoryOpt, KvCacheOpt, MaxModelLenOpt, ModelOpt,
                                QuantizationOpt, SPECULATIVE_TOKENS, SpeculativeOpt, ThreadsOpt, parse_quantization,
                                parse_threads, set_threads)

__all__ = ["register"]


def chat(
    model: ModelOpt = MODEL,
    system: Annotated[str | None, typer.Option(help="System prompt (the template's default when omitted).")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Most tokens per reply.")] = 256,
    temperature: Annotated[float, typer.Option(help="0 = greedy; otherwise sampling temperature.")] = 0.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass (with --temperature > 0).")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed for sampling.")] = 0,
    device: DeviceOpt = DEVICE,
    dtype: DtypeOpt = DTYPE,
    quantization: QuantizationOpt = QUANTIZATION,
    threads: ThreadsOpt = THREADS,
    speculative_tokens: SpeculativeOpt = SPECULATIVE_TOKENS,
    kv_cache_gib: KvCacheOpt = KV_CACHE_GIB,
    gpu_memory_utilization: GpuMemoryOpt = GPU_MEMORY_UTILIZATION,
    max_model_len: MaxModelLenOpt = None,
) -> None:
    """Chat with a model; the conversation's KV cache is kept between turns.

    Example:
        $ dossier chat
        you> What is the capital of France?
        assistant> The capital of France is Paris.
          \\[prefilled 37 · cached 0 · generated 8 · 1.5 s]
        you> And of Germany?
        assistant> The capital of Germany is Berlin.
          \\[prefilled 15 · cached 44 · generated 8 · 0.5 s]
        you> /exit
    """
    from engine.core.threads import spin_briefly_if_adaptive

    cpu_threads = parse_threads(threads)  # None: adapt to the load
    spin_briefly_if_adaptive(cpu_threads is None)  # before torch loads OpenMP (engine/core/threads.py)
    from engine import Engine, EngineConfig, SamplingParams

    if cpu_threads:
        set_threads(cpu_threads)
    config = EngineConfig(device=device, dtype=dtype, kv_cache_gib=kv_cache_gib,
                          gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, seed=seed,
                          quantization=parse_quantization(quantization),
                          cpu_threads=cpu_threads, speculative_tokens=speculative_tokens)
    engine = Engine.from_pretrained(model, config)
    if engine.processor is None:
        from tools.errors import DossierError

        raise DossierError(f"model {model!r} has no tokenizer (random-weight shape); chat needs a real model")
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
    interactive = sys.stdin.isatty()
    session = _new_session(engine, system)
    while True:
        if interactive:
            typer.echo("you> ", nl=False)
        line = sys.stdin.readline()
        if not line:
            break
        text = line.rstrip("\n")
        if not text.strip():
            continue
        if text.strip() == "/exit":
            break
        if text.strip() == "/reset":
            session.close()
            session = _new_session(engine, system)
            typer.echo("(new session)")
            continue
        if text.strip() == "/stats":
            typer.echo(engine.stats())
            continue
        session.append_message("user", text)
        session.append_generation_prompt()
        started = time.perf_counter()
        reply = session.generate(sampling)
        typer.echo(f"assistant> {reply.text.strip()}")
        c = reply.counters
        typer.secho(
            f"  [prefilled {c.tokens_prefilled} · cached {c.tokens_cached} · generated {c.tokens_generated} · "
            f"{time.perf_counter() - started:.1f} s]",
            dim=True,
        )
    session.close()


def _new_session(engine, system: str | None):
    session = engine.open_session()
    if system:
        session.append_message("system", system)
    return session


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
