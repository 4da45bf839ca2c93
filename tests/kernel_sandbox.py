"""The mark for tests that run model-written code: it runs only inside the kernel sandbox (bubblewrap), so without one
(bubblewrap not installed, or no user namespaces) they skip, naming what to install; .ci/run installs it."""

from __future__ import annotations

import pytest

__all__ = ["needs_kernel_sandbox"]


def _missing() -> str | None:
    from tools.sandbox.boundary import kernel_boundary

    boundary = kernel_boundary()
    return None if boundary.held else f"model-written code needs the kernel sandbox: {boundary.how}"


_REASON = _missing()
needs_kernel_sandbox = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
