"""Helpers of scripts/gpu_check.sh: the wheels to carry, the gpu test files, the environment, the report.

    python scripts/gpu_check_report.py prepare .gpu-wheels       # download the carried wheels (CPU machine, registry)
    python scripts/gpu_check_report.py gpu-test-files            # the test files that hold gpu-marked tests
    python scripts/gpu_check_report.py environment               # GPU, driver, versions as one JSON line
    python scripts/gpu_check_report.py check                     # dry run: every step's code importable, tests collect
    python scripts/gpu_check_report.py assemble WORK OUT         # WORK/*.out + OUT/gpu-tests.xml -> OUT/gpu_check.json

The GPU test machine (Python 3.12, torch 2.11 + CUDA 13, triton 3.6, transformers 5.17, numba, safetensors,
tokenizers, accelerate, peft, pandas, pillow, pytest, typer) reaches no registry: what the gpu tests and
benchmarks need beyond it travels as wheels in the working tree, downloaded here by `prepare` for CPython 3.12
on manylinux x86-64. Only what a step imports is carried (bm25s: the search paths); PyMuPDF (69 MB), vLLM,
flash-attn (no binary wheel), bitsandbytes and the bundled MiniLM do not fit the 64 MiB a call may carry, and
the tests that need them skip with that reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE_PYTHON = "3.12"  # the GPU test machine's interpreter
CARRIED = {"bm25s": "0.3.16"}  # name -> version, pinned as pyproject pins them
WHEEL_BUDGET_MIB = 40
# What each step imports, checked by `check`.
STEP_MODULES = {
    "environment": [],
    "tests": ["pytest"],
    "throughput": ["benchmarks.gpu_throughput"],
    "agent_vs_hf": ["benchmarks.engine_sessions", "engine.cli.bench"],
    "maxsim": ["benchmarks.workloads.maxsim_bench"],
    "bm25": ["benchmarks.workloads.bm25_bench", "kernels.bm25_triton"],
}
STEP_FILES = ["benchmarks/bench_maxsim.py", "scripts/gpu_check.sh"]
_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
              "manylinux1_x86_64"]


def gpu_test_files() -> list[str]:
    """Test files holding gpu-marked tests, found by reading them (importing them is what must not be needed)."""
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                  if "pytest.mark.gpu" in path.read_text(errors="replace"))


def installs_on_image(wheel: str) -> bool:
    """Whether a wheel file name's tags admit CPython 3.12 on x86-64 Linux (name-version[-build]-py-abi-platform)."""
    python, abi, platform = wheel[:-len(".whl")].split("-")[-3:]
    minor = int(IMAGE_PYTHON.split(".")[1])

    def python_ok(tag: str) -> bool:
        if tag in ("py3", "py2.py3") or tag.startswith("py3"):
            return True
        if tag.startswith("cp3") and tag[3:].isdigit():
            return int(tag[3:]) == minor or (abi == "abi3" and int(tag[3:]) <= minor)
        return False

    platform_ok = all(p == "any" or (p.endswith("x86_64") and "linux" in p) for p in platform.split("."))
    return any(python_ok(tag) for tag in python.split(".")) and platform_ok


def prepare(folder: Path) -> int:
    """Download the carried wheels for the image's Python; refuse one that would not install there."""
    folder = ROOT / folder if not folder.is_absolute() else folder
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    platforms = [arg for platform in _PLATFORMS for arg in ("--platform", platform)]
    wanted = [f"{name}=={version}" for name, version in CARRIED.items()]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               IMAGE_PYTHON, "--implementation", "cp", *platforms, "-d", str(folder), *wanted]
    print("downloading:", " ".join(wanted), flush=True)
    if subprocess.run(command).returncode != 0:
        print("pip could not download the wheels (no registry here?)", file=sys.stderr)
        return 1
    wheels = sorted(folder.glob("*.whl"))
    for wheel in wheels:
        if not installs_on_image(wheel.name):
            print(f"refusing {wheel.name}: it does not install on the GPU machine's CPython {IMAGE_PYTHON} "
                  "(x86-64 manylinux)", file=sys.stderr)
            return 1
    size = sum(w.stat().st_size for w in wheels) / 2**20
    if size > WHEEL_BUDGET_MIB:
        print(f"the wheels take {size:.1f} MiB, over the {WHEEL_BUDGET_MIB} MiB budget", file=sys.stderr)
        return 1
    relative = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    for wheel in wheels:
        print(f"  {wheel.name} ({wheel.stat().st_size / 2**20:.2f} MiB)")
    print(f"carry: [\"{relative}\"]")
    print("command: scripts/gpu_check.sh   (on the GPU machine, with a time limit of 420 s: a second run fits)")
    print(f"wheels: {relative} ({len(wheels)} files, {size:.2f} MiB)")
    return 0


def environment() -> dict:
    info: dict = {"python": sys.version.split()[0]}
    for name in ("torch", "triton", "transformers", "bitsandbytes", "flash_attn", "vllm"):
        spec = importlib.util.find_spec(name)
        if spec is None:
            info[name] = None
            continue
        try:
            info[name] = getattr(importlib.import_module(name), "__version__", "present")
        except Exception as error:  # a broken install is worth recording, not fatal
            info[name] = f"import failed: {type(error).__name__}: {error}"
    try:
        import torch

        info["cuda_available"] = torch.cuda.is_available()
        info["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                           "capability": f"{props.major}.{props.minor}", "sms": props.multi_processor_count}
    except ImportError:
        info["cuda_available"] = False
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        info["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        info["nvidia_smi"] = f"unavailable: {error}"
    return info


def check() -> int:
    """Dry run: every module a step imports is importable, every file it runs exists, the gpu tests collect from
    their own files (an optional import elsewhere in tests/ must not stop them)."""
    sys.path.insert(0, str(ROOT))
    problems = []
    for step, modules in STEP_MODULES.items():
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception as error:
                problems.append(f"{step}: cannot import {module}: {type(error).__name__}: {error}")
    problems += [f"missing file {name}" for name in STEP_FILES if not (ROOT / name).is_file()]
    files = gpu_test_files()
    collect = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-o", "addopts=",
                              "-p", "no:cacheprovider", *files], cwd=ROOT, capture_output=True, text=True)
    tests = [line for line in collect.stdout.splitlines() if "::" in line]
    if collect.returncode != 0 or not tests:
        problems.append(f"tests: collecting the gpu-marked tests failed: {collect.stdout[-800:]}{collect.stderr[-500:]}")
    print(f"[dry-run] tests: {len(tests)} gpu-marked tests collected from {len(files)} files: {', '.join(files)}")
    for problem in problems:
        print(f"[dry-run] PROBLEM {problem}", file=sys.stderr)
    print(f"[dry-run] {'every step is ready' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


def _last_json(path: Path):
    if not path.is_file():
        return None
    for line in reversed(path.read_text(errors="replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    text = path.read_text(errors="replace")
    if text.strip().startswith("{"):  # pretty-printed JSON (dossier --format json)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return None
    return None


def _tests(xml: Path) -> dict | None:
    if not xml.is_file():
        return None
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    cases = []
    for case in suite.iter("testcase"):
        outcome = "passed"
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                reason = (node.get("message") or "")[:300]
                break
        else:
            reason = ""
        cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time", 0)), **({"reason": reason} if reason else {})})
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")}
    return {**counts, "cases": cases}


def assemble(work: Path, out: Path) -> None:
    """gpu_check.json from the steps run so far (rewritten after every step, so a killed run still reports)."""
    steps = {}
    for line in (work / "steps.tsv").read_text().splitlines():
        name, status, seconds, limit = line.split("\t")
        raw = work / f"{name}.out"
        entry = {"status": status, "seconds": int(seconds), "limit_s": int(limit), "result": _last_json(raw)}
        if raw.is_file():
            entry["log_tail"] = raw.read_text(errors="replace")[-1500 if status == "ok" else -4000:]
        steps[name] = entry
    report = {"environment": (steps.get("environment") or {}).get("result"),
              "tests": _tests(out / "gpu-tests.xml"), "steps": steps,
              "seconds_total": sum(s["seconds"] for s in steps.values())}
    partial = out / "gpu_check.json.part"
    partial.write_text(json.dumps(report, indent=1))
    partial.replace(out / "gpu_check.json")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "environment":
        print(json.dumps(environment()))
    elif command == "check":
        sys.exit(check())
    elif command == "gpu-test-files":
        print(" ".join(gpu_test_files()))
    elif command == "prepare" and len(sys.argv) == 3:
        sys.exit(prepare(Path(sys.argv[2])))
    elif command == "assemble" and len(sys.argv) == 4:
        assemble(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
