"""Pick an OCR backend by name: `auto`, `rapidocr`, `tesseract`, `surya` or `none`.

`auto` takes the best backend present, in this order (measured by benchmarks/bench_ocr.py):

1. surya, when local checkpoints are configured and a GPU is present (a VLM: best on hard
   scans, far too slow on a CPU);
2. tesseract, when Debian's `tesseract-ocr` is installed: on the scanned samples it is as
   accurate as rapidocr (linn: 0.990 vs 0.992 character accuracy) and ~7x faster per page
   on this 2-core CPU (benchmarks/bench_ocr.py);
3. rapidocr, a pip dependency of Dossier with its models in the wheel, so present everywhere.

Asking for a backend by name that is not usable raises `MissingDependencyError` naming the
install command; `auto` with nothing usable resolves to None (OCR is skipped, pages stay
flagged) and says why through `backend_status()`.
"""

from __future__ import annotations

import os

from tools.errors import DossierError, MissingDependencyError
from tools.ocr.base import OcrBackend
from tools.ocr.rapid import RapidOcrBackend
from tools.ocr.surya import SuryaBackend, SuryaConfig
from tools.ocr.tesseract import TesseractBackend

__all__ = ["OCR_CHOICES", "BACKENDS", "backend_status", "resolve_backend", "get_backend"]

BACKENDS: dict[str, type[OcrBackend]] = {
    "surya": SuryaBackend,
    "tesseract": TesseractBackend,
    "rapidocr": RapidOcrBackend,
}
OCR_CHOICES = ("auto", "rapidocr", "tesseract", "surya", "none")


def _gpu_present() -> bool:
    device = os.environ.get("TORCH_DEVICE", "")
    if device:
        return device.startswith("cuda")
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def backend_status() -> dict[str, str | None]:
    """For each backend, None when usable here, else why not (with the install command)."""
    return {name: cls.unavailable_reason() for name, cls in BACKENDS.items()}


def resolve_backend(name: str) -> str | None:
    """Turn a user's choice into a concrete backend name, or None for no OCR.

    Raises:
        DossierError: `name` is not one of OCR_CHOICES.
        MissingDependencyError: a backend asked for by name is not usable here.
    """
    if name not in OCR_CHOICES:
        raise DossierError(f"unknown OCR backend {name!r}; choose one of {', '.join(OCR_CHOICES)}")
    if name == "none":
        return None
    if name != "auto":
        reason = BACKENDS[name].unavailable_reason()
        if reason:
            raise MissingDependencyError(reason)
        return name
    for candidate, cls in BACKENDS.items():
        if cls.unavailable_reason() is None and (candidate != "surya" or _gpu_present()):
            return candidate
    return None


def get_backend(name: str = "auto", *, threads: int = 0, language: str = "eng", timeout_s: float = 120.0,
                surya: SuryaConfig | None = None) -> OcrBackend:
    """Create an OCR backend.

    Args:
        name: 'auto', 'rapidocr', 'tesseract' or 'surya'.
        threads: rapidocr's onnxruntime threads (0 = all cores).
        language: tesseract language code(s), e.g. 'eng' or 'eng+deu'.
        timeout_s: tesseract's per-image limit in seconds.
        surya: surya worker settings (default: read from the environment).

    Raises:
        MissingDependencyError: the backend (or, for 'auto', every backend) is unusable here.

    Example:
        >>> with get_backend("auto") as ocr:
        ...     result = ocr.read(image)
        >>> result.words[:3], result.normalized_boxes[:3]
    """
    if name == "none":
        raise DossierError("get_backend('none'): no backend to create; skip OCR instead")
    resolved = resolve_backend(name)
    if resolved is None:
        reasons = "; ".join(f"{n}: {r}" for n, r in backend_status().items() if r)
        raise MissingDependencyError(f"no OCR backend is usable here ({reasons})")
    if resolved == "rapidocr":
        return RapidOcrBackend(threads=threads)
    if resolved == "tesseract":
        return TesseractBackend(language=language, timeout_s=timeout_s)
    return SuryaBackend(surya)
