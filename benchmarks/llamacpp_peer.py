"""llama.cpp's server as the CPU peer of `dossier bench serve`, through the prebuilt `xllamacpp` wheel.

llama.cpp is what a CPU user would pick: its own quantised kernels (Q4_K_M, Q4_1 run natively),
continuous batching over slots and a prompt cache per slot. `xllamacpp` ships it as a manylinux
wheel (no compiler; `pip install 'dossier[bench-peers]'`), whose `Server(CommonParams)` serves the
OpenAI routes (`/v1/chat/completions`, `/health`) until the process ends.

It loads the very GGUF file Dossier converts from (the embedded SmolLM2 or a packaged Qwen), with
one slot per client, 4096 tokens of context per slot, the same threads for prompt and generation,
continuous batching, the prompt cache and the model's own Jinja chat template. When Dossier drafts tokens
(`--speculative-tokens K`, on by default), llama.cpp drafts too, by its own n-gram method from the same kind of
source: `ngram-simple` (llama.cpp's docs/speculative.md: "looks for the last n-gram in history that matches the
current n-gram and creates a draft using the m tokens following the matched n-gram") with n = 3, Dossier's
shortest match, and at most K tokens; with K = 0 neither drafts.

Run as a process: `python -m benchmarks.llamacpp_peer GGUF PORT SLOTS THREADS [DRAFT_TOKENS]`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

__all__ = ["gguf_of", "llamacpp_command", "missing_reason"]

CONTEXT_PER_SLOT = 4096  # tokens of KV per slot: an episode's whole conversation fits
DRAFT_MATCH = 3  # ngram-simple's n: the n-gram looked up, Dossier's MIN_MATCH (engine/core/speculation.py)


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


def llamacpp_command(gguf: Path, port: int, slots: int, threads: int, draft_tokens: int = 0) -> list[str]:
    return [sys.executable, "-m", "benchmarks.llamacpp_peer", str(gguf), str(port), str(slots), str(threads),
            str(draft_tokens)]


def serve(gguf: str, port: int, slots: int, threads: int, draft_tokens: int = 0) -> None:
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
    if draft_tokens:
        speculative = params.speculative  # a view: its fields are set in place
        speculative.types = [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        speculative.ngram_simple.size_n = DRAFT_MATCH
        speculative.ngram_simple.size_m = draft_tokens
        speculative.draft.n_max = draft_tokens
    server = xllamacpp.Server(params)  # serves in its own threads
    drafting = f", n-gram drafts of up to {draft_tokens} tokens" if draft_tokens else ""
    print(f"llama.cpp server at http://127.0.0.1:{port}/v1 ({slots} slots, {threads} threads{drafting})", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        del server


if __name__ == "__main__":
    path, port, slots, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    serve(path, port, slots, threads, int(sys.argv[5]) if len(sys.argv) > 5 else 0)
