"""`dossier bench quant`: dtypes and quantisations against the float32 model: top-1 agreement, memory, speed."""

from typing import Annotated

import typer

from engine.cli.options import (MODEL, FormatOpt, ModelOpt, OutputFormat, device_opt, emit_json, fixed_threads,
                                threads_opt)

__all__ = ["register_bench"]

# The shared options with this benchmark's own defaults, and why.
ThreadsEveryEngineOpt = threads_opt("2 here, not auto, and a number only: every engine gets the same fixed threads, "
                                    "so their tok/s compare.")
CpuDeviceOpt = device_opt("cpu here, not auto: the bound it reports is this CPU's copy bandwidth.")


def bench_quant(
    model: ModelOpt = MODEL,
    variants: Annotated[str, typer.Option(help="Comma-separated: dtypes (bfloat16, float16) and quantisations of the "
                                               "float32 model (int4, int8, nf4).")] = "bfloat16,int4,int8",
    threads: ThreadsEveryEngineOpt = "2",
    device: CpuDeviceOpt = "cpu",
    new_tokens: Annotated[int, typer.Option(help="Greedy continuation per prompt whose positions are compared.")] = 32,
    prompt_tokens: Annotated[int, typer.Option(help="Prompt length of the prefill timing, tokens.")] = 256,
    speed: Annotated[bool, typer.Option(help="Time prefill and decode (--no-speed: agreement and memory only).")] = True,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Each variant against the float32 model in one run: top-1 agreement (teacher-forced, 8 fixed prompts),
    weights' memory, prefill and decode tok/s at batch 1 and 8, and decode at batch 1 as a fraction of this
    machine's memory-bandwidth bound (bytes of weights read per token ÷ a measured copy bandwidth).

    Example (SmolLM2 on a 2-core AVX2 CPU with no native bf16, nothing else running; int4 with groups of 64 and
    int8 with one activation scale per call, as they were then):
        $ dossier bench quant --variants bfloat16,int4,int8
        variant    top-1 weights MiB read/token MiB prefill b1 prefill b8 decode b1 decode b8 of bound
        float32        -       513.1          513.1      294.6      383.3     11.46     49.14     0.23
        bfloat16   0.966       256.6          256.6       94.8      104.6     17.66     43.31     0.18
        int4       0.784       569.3          164.3      375.3      357.5     17.41     75.19     0.11
        int8       0.519       210.0          210.0      450.9      602.9     14.94     83.35     0.12
        tok/s with 2 threads; copy bandwidth 26.63 GB/s; top-1 over 264 positions of 8 prompts
    """
    threads_each = fixed_threads(threads, "bench quant", "every engine gets the same")
    from benchmarks.quant_variants import compare_variants

    chosen = tuple(v.strip() for v in variants.split(",") if v.strip())
    progress = None if fmt is OutputFormat.json else (lambda msg: typer.echo(f"… {msg}", err=True))
    result = compare_variants(model, chosen, new_tokens=new_tokens, prompt_tokens=prompt_tokens, threads=threads_each,
                              device=device, speed=speed, progress=progress)
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    mib = 2**20
    typer.echo(f"{'variant':<9} {'top-1':>6} {'weights MiB':>11} {'read/token MiB':>14} {'prefill b1':>10} "
               f"{'prefill b8':>10} {'decode b1':>9} {'decode b8':>9} {'of bound':>8}")
    for row in result["rows"]:
        top1 = "-" if row["top1_agreement"] is None else f"{row['top1_agreement']:.3f}"
        timing = ""
        if speed:
            timing = (f" {row['prefill_tok_s_batch1']:>10.1f} {row['prefill_tok_s_batch8']:>10.1f} "
                      f"{row['decode_tok_s_batch1']:>9.2f} {row['decode_tok_s_batch8']:>9.2f} "
                      f"{row['decode_batch1_fraction_of_bound']:>8.2f}")
        typer.echo(f"{row['variant']:<9} {top1:>6} {row['weight_bytes'] / mib:>11.1f} "
                   f"{row['decode_bytes_per_token'] / mib:>14.1f}{timing}")
    if speed:
        typer.echo(f"tok/s with {result['threads']} threads; copy bandwidth {result['copy_bandwidth_gb_s']} GB/s; "
                   f"top-1 over {result['rows'][1]['positions'] if len(result['rows']) > 1 else 0} positions of "
                   f"{result['prompts']} prompts")


def register_bench(bench_app: typer.Typer) -> None:
    bench_app.command("quant")(bench_quant)
