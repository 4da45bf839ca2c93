"""`dossier version`: the installed version and which optional backends are present."""

import importlib.util
import shutil

import typer

from engine.cli.options import FormatOpt, OutputFormat, emit_json

__all__ = ["register"]

_OPTIONAL = {
    "numba": "numba",
    "triton": "triton",
    "flash-attn": "flash_attn",
    "vllm": "vllm",
    "bitsandbytes": "bitsandbytes",
    "surya-ocr": "surya",
    "rapidocr": "rapidocr",
    "xgrammar": "xgrammar",
}


def version(fmt: FormatOpt = OutputFormat.human) -> None:
    """Print Dossier's version, the optional backends found, the dtype --dtype auto and the quantisation
    --quantization auto pick here and why, the kernels --quantization int8 runs on here, and what the code sandbox
    guarantees here.

    The sandbox (used for every model-written program, e.g. the workflow agent's code stage) is
    probed by running one program in it; a guarantee the machine cannot give is marked "no".

    Example:
        $ dossier version
        dossier 0.1.0
        numba         yes
        flash-attn    no
        dtype auto    float32 on cpu: the CPU has neither avx512_bf16 nor amx_bf16 (bf16 would be emulated, ...)
        quant. auto   int8 on cpu: the CPU has no native bf16: FBGEMM's int8 is its fastest kernel at every size, ...
        int8 (cpu)    FBGEMM (no AMX int8 tiles here)
        openmp wait   serve and chat with --threads auto spin ~0.1 ms (GOMP_SPINCOUNT=10000), then sleep; a fixed ...
        sandbox:
          yes  kernel boundary: bubblewrap 0.8.0 (/usr/bin/bwrap): fresh mount, PID, network, IPC and UTS ...
          yes  no network: network namespace (bubblewrap); the socket module is refused in any case
          yes  memory limit: RLIMIT_AS 1024 MB
    """
    from importlib.metadata import version as dist_version

    backends = {name: importlib.util.find_spec(module) is not None for name, module in _OPTIONAL.items()}
    backends["tesseract"] = shutil.which("tesseract") is not None
    try:
        import torch

        backends["cuda"] = torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        backends["cuda"] = False
    from engine.core.dtypes import auto_dtype, auto_quantization
    from engine.core.threads import waiting_policy
    from tools.sandbox import sandbox_guarantees

    device = "cuda" if backends["cuda"] else "cpu"
    choice = auto_dtype(device)
    quantized = auto_quantization(device, "auto")

    from models.int_linear import INT8_WIDE_ROWS, amx_int8

    int8 = (f"FBGEMM below {INT8_WIDE_ROWS} rows a step, oneDNN's AMX kernel from {INT8_WIDE_ROWS} (prefill; a second "
            "packed copy of the weights)" if amx_int8() else "FBGEMM (no AMX int8 tiles here)")
    sandbox = [{"guarantee": what, "held": held, "how": how} for what, held, how in sandbox_guarantees()]
    info = {"dossier": dist_version("dossier"), "backends": backends,
            "dtype_auto": {"device": device, "dtype": choice.name, "why": choice.reason},
            "quantization_auto": {"device": device, "quantization": quantized.name, "why": quantized.reason},
            "int8_cpu": int8, "openmp_waiting": waiting_policy(),
            "sandbox": sandbox}
    if fmt is OutputFormat.json:
        emit_json(info)
        return
    typer.echo(f"dossier {info['dossier']}")
    for name, present in backends.items():
        typer.echo(f"{name:<13} {'yes' if present else 'no'}")
    typer.echo(f"{'dtype auto':<13} {choice.name} on {device}: {choice.reason}")
    typer.echo(f"{'quant. auto':<13} {quantized.name or 'none'} on {device}: {quantized.reason}")
    typer.echo(f"{'int8 (cpu)':<13} {int8}")
    typer.echo(f"{'openmp wait':<13} {info['openmp_waiting']}")
    typer.echo("sandbox:")
    for item in sandbox:
        typer.echo(f"  {'yes' if item['held'] else 'NO ':<4} {item['guarantee']}: {item['how']}")


def register(app: typer.Typer) -> None:
    app.command("version")(version)
