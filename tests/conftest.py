"""Shared fixtures. `shared_dir` is the ONLY way tests reach ../shared; it skips when absent."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import engine.core  # noqa: E402,F401  before any test imports torch: OpenMP settings (engine/core/threads.py)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def float32_means_auto(monkeypatch):
    """The suite's references are float32 (HF models, hand-computed logits): in-process engines built with
    dtype="auto" run in float32 on every CPU, as on CPUs without native bf16, and quantization="auto" (int8 on
    such CPUs) quantises nothing. bf16 and int8 are tested by asking for them (tests/engine/test_cpu_dtypes.py),
    and what each "auto" picks from the CPU's flags is tested there too."""
    from engine.core import dtypes

    monkeypatch.setattr(dtypes, "cpu_bf16_flags", _no_native_bf16)
    monkeypatch.setattr(dtypes, "auto_quantization", _model_dtype)  # and quantization="auto" keeps float32


def _no_native_bf16() -> tuple[str, ...]:
    return ()


def _model_dtype(device: str, dtype: str):
    from engine.core.dtypes import AutoQuantization

    return AutoQuantization(None, "the test suite's references are float32")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data folder (../shared, or $DOSSIER_SHARED); skips the test when it is absent."""
    path = Path(os.environ.get("DOSSIER_SHARED", ROOT.parent / "shared"))
    if not (path / "data").is_dir():
        pytest.skip(f"shared data not found at {path} (set DOSSIER_SHARED to run this test)")
    return path
