"""Which device `device="auto"` means here, and why it is the CPU when a GPU is present.

The registry's torch (`torch==2.14.1`) is a CUDA 13 build: it needs an NVIDIA driver of the R580
series or newer. On a CUDA-12 workstation its `torch.cuda.is_available()` is simply False, and a
run would silently go to the CPU, 50-100x slower. `cpu_fallback_reason()` notices that case (torch
built for CUDA, an NVIDIA driver loaded, no usable device) and says which driver the build needs
and how to install a matching torch. It reads the driver's version from
/proc/driver/nvidia/version, so it needs no CUDA library.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path

__all__ = ["auto_device", "cpu_fallback_reason", "driver_version", "required_driver"]

log = logging.getLogger(__name__)

# CUDA major version -> the oldest driver series that runs it (NVIDIA's minor-version compatibility table)
_MIN_DRIVER = {13: 580, 12: 525, 11: 450}
_DRIVER_FILE = Path("/proc/driver/nvidia/version")


def driver_version(path: Path = _DRIVER_FILE) -> str | None:
    """The loaded NVIDIA kernel driver's version ("570.86.10"), or None when no NVIDIA driver is loaded."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return found.group(1) if found else None


def required_driver(cuda: str) -> int | None:
    """The oldest driver series a torch built for CUDA `cuda` ("13.0") runs on."""
    try:
        return _MIN_DRIVER.get(int(cuda.split(".")[0]))
    except ValueError:
        return None


def cpu_fallback_reason(cuda_built: str | None, cuda_usable: bool, driver: str | None) -> str | None:
    """Why "auto" is the CPU although this machine has an NVIDIA GPU, or None when that is not the case.

    Args:
        cuda_built: `torch.version.cuda` (None for a CPU build).
        cuda_usable: `torch.cuda.is_available()`.
        driver: `driver_version()`.
    """
    if cuda_usable or driver is None:
        return None  # a working GPU, or no NVIDIA driver at all: nothing to explain
    if cuda_built is None:
        return (f"--device auto chose the CPU: this torch is a CPU build, but an NVIDIA driver ({driver}) is loaded; "
                "install a CUDA build of torch for it (https://pytorch.org/get-started/locally/)")
    needed = required_driver(cuda_built)
    major = int(driver.split(".")[0])
    if needed is not None and major < needed:
        return (f"--device auto chose the CPU: this torch was built for CUDA {cuda_built}, which needs an NVIDIA driver "
                f">= {needed}, and this machine's driver is {driver}; update the driver, or install a torch built for "
                f"the CUDA your driver supports, e.g. pip install torch==2.14.1 --index-url "
                "https://download.pytorch.org/whl/cu126 (driver >= 525)")
    return (f"--device auto chose the CPU: this torch was built for CUDA {cuda_built} and the NVIDIA driver {driver} is "
            "loaded, but torch sees no usable GPU (python -c 'import torch; torch.cuda.init()' prints why)")


@functools.cache
def auto_device() -> str:
    """"cuda" when torch can use a GPU, else "cpu", warning once with the reason when a GPU is present but unusable."""
    import torch

    usable = torch.cuda.is_available()
    reason = cpu_fallback_reason(torch.version.cuda, usable, driver_version())
    if reason:
        log.warning(reason)
    return "cuda" if usable else "cpu"
