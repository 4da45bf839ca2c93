"""Where Dossier caches what it derives from model files (converted GGUFs, assembled part packages)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """Where converted models are cached: $DOSSIER_CACHE or ~/.cache/dossier."""
    return Path(os.environ.get("DOSSIER_CACHE", Path.home() / ".cache" / "dossier"))
