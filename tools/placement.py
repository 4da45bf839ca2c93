"""Where a search structure lives: on the GPU when asked and it fits, otherwise on the CPU.

BM25 score matrices (`dossier search --device cuda`) and late-interaction page embeddings
(`--late-device cuda`) are copied to the GPU once and scored there by the Triton kernels. A
structure that would leave less than `headroom` of the free device memory for the rest (the
model, the dense score rows) stays on the CPU, with a warning saying why; nothing is lost.
"""

from __future__ import annotations

import logging

from tools.errors import DossierError

__all__ = ["resolve_device", "fits_on_cuda"]

log = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str, option: str = "--device") -> str:
    """"auto": cuda when torch sees a GPU, else cpu; "cuda" without a GPU is an error naming `option`."""
    if device not in DEVICES:
        raise DossierError(f"{option} {device!r} is not one of {', '.join(DEVICES)}")
    if device == "cpu":
        return device  # without importing torch: a BM25 search on the CPU never needs it
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise DossierError(f"{option} cuda: no CUDA device is visible to torch; use {option} cpu")
    return device


def fits_on_cuda(nbytes: int, what: str, headroom: float = 0.5) -> bool:
    """True when `nbytes` fit in `headroom` of the GPU's free memory; else warn that `what` stays on the CPU."""
    import torch

    free, _total = torch.cuda.mem_get_info()
    if nbytes <= headroom * free:
        return True
    log.warning("%s needs %.2f GiB but the GPU has %.2f GiB free; scoring it on the CPU instead",
                what, nbytes / 2**30, free / 2**30)
    return False
