"""`dossier bench quant`: a quantised model against the unquantised one, top-1 agreement and memory."""

from typing import Annotated

import typer

from engine.cli.options import FormatOpt, ModelOpt, OutputFormat, emit_json

__all__ = ["register_bench"]


def bench_quant(
    model: ModelOpt = "default",
    quantization: Annotated[str, typer.Option(help="nf4 (4-bit NormalFloat) or int8 (LLM.int8).")] = "nf4",
    reference_dtype: Annotated[str, typer.Option(help="dtype of the unquantised reference and of the quantised "
                                                      "model's compute: bfloat16, float16 or float32.")] = "bfloat16",
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "auto",
    new_tokens: Annotated[int, typer.Option(help="Greedy continuation per prompt whose positions are compared.")] = 32,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Top-1 agreement (teacher-forced, 8 fixed prompts) and weight memory of a quantised language model.

    The reference writes each prompt's greedy continuation; both models then score the same tokens
    and every continuation position counts as agreeing when their most likely next tokens match.

    Example:
        $ dossier bench quant --quantization nf4
        nf4 vs bfloat16 (SmolLM2-135M-Instruct, cpu): top-1 agreement 0.765 over 264 positions (8 prompts)
        weights 256.6 MiB -> 106.4 MiB (2.41x smaller); language-model linears 202.6 MiB -> 52.4 MiB
    """
    from benchmarks.quant_quality import compare_quantization

    progress = None if fmt is OutputFormat.json else (lambda msg: typer.echo(f"… {msg}", err=True))
    result = compare_quantization(model, quantization, reference_dtype, device, new_tokens, progress)
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    mib = 2**20
    weights, linears = result["weight_bytes"], result["linear_bytes"]
    name = "SmolLM2-135M-Instruct" if model == "default" else model
    typer.echo(f"{quantization} vs {reference_dtype} ({name}, {result['device']}): top-1 agreement "
               f"{result['top1_agreement']:.3f} over {result['positions']} positions ({result['prompts']} prompts)")
    typer.echo(f"weights {weights['reference'] / mib:.1f} MiB -> {weights['quantized'] / mib:.1f} MiB "
               f"({result['memory_ratio']:.2f}x smaller); language-model linears {linears['reference'] / mib:.1f} MiB "
               f"-> {linears['quantized'] / mib:.1f} MiB")


def register_bench(bench_app: typer.Typer) -> None:
    bench_app.command("quant")(bench_quant)
