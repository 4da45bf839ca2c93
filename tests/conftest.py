"""Shared fixtures. `shared_dir` is the ONLY way tests reach ../shared; it skips when absent."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_THREAD_LIMIT", "1")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data folder (../shared, or $DOSSIER_SHARED); skips the test when it is absent."""
    path = Path(os.environ.get("DOSSIER_SHARED", ROOT.parent / "shared"))
    if not (path / "data").is_dir():
        pytest.skip(f"shared data not found at {path} (set DOSSIER_SHARED to run this test)")
    return path
