"""Load a runnable check from scripts/ as a module, for the tests that run it in the default suite."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    """The module `scripts/<name>.py` (registered in sys.modules under `name`, as dataclasses need)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
