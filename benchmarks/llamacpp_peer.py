"""llama.cpp's server as the CPU peer of `dossier bench serve`, through the prebuilt `xllamacpp` wheel.

llama.cpp is what a CPU user would pick: its own quantised kernels (Q4_K_M, Q4_1 run natively),
continuous batching over slots and a prompt cache per slot. `xllamacpp` ships it as a manylinux
wheel (no compiler; `pip install 'dossier[bench-peers]'`), whose `Server(CommonParams)` serves the
OpenAI routes (`/v1/chat/completions`, `/health`) until the process ends.

It loads the very GGUF file Dossier converts from (the embedded SmolLM2 or a packaged Qwen), with
one slot per client, 4096 tokens of context per slot, the same threads for prompt and generation,
continuous batching, the prompt cache and the model's own Jinja chat template.

Run as a process: `python -m benchmarks.llamacpp_peer GGUF PORT SLOTS THREADS`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

__all__ = ["gguf_of", "llamacpp_command", "missing_reason"]

CONTEXT_PER_SLOT = 4096  # tokens of KV per slot: an episode's whole conversation fits


def gguf_of(model: str) -> Path:
    """The GGUF file behind `model` ("default", a packaged name, or a .gguf path); DossierError otherwise."""
    from models.loading import default_gguf_path
    from models.packaged import PACKAGED_MODELS, assemble_gguf
    from tools.errors import DossierError

    if model == "default":
        return default_gguf_path()
    if model in PACKAGED_MODELS:
        return assemble_gguf(PACKAGED_MODELS[model])
    path = Path(model)
    if path.suffix.lower() == ".gguf" and path.is_file():
        return path
    raise DossierError(f"llama.cpp's server needs a GGUF file; {model!r} is not one (give a .gguf file, 'default' "
                       "or a packaged model)")


def missing_reason() -> str | None:
    """Why the peer cannot run here (its wheel missing), or None."""
    import importlib.util

    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed: pip install 'dossier[bench-peers]'"
    return None


def llamacpp_command(gguf: Path, port: int, slots: int, threads: int) -> list[str]:
    return [sys.executable, "-m", "benchmarks.llamacpp_peer", str(gguf), str(port), str(slots), str(threads)]


def serve(gguf: str, port: int, slots: int, threads: int) -> None:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = gguf
    params.port = port
    params.hostnames = ["127.0.0.1"]
    params.n_parallel = slots
    params.n_ctx = CONTEXT_PER_SLOT * slots
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.cont_batching = True
    params.cache_prompt = True
    params.use_jinja = True
    server = xllamacpp.Server(params)  # serves in its own threads
    print(f"llama.cpp server at http://127.0.0.1:{port}/v1 ({slots} slots, {threads} threads)", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        del server


if __name__ == "__main__":
    path, port, slots, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    serve(path, port, slots, threads)
