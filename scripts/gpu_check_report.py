"""Helpers of scripts/gpu_check.sh: the environment record, the dry-run check, the final JSON.

    python scripts/gpu_check_report.py environment     # GPU, driver, versions as one JSON line
    python scripts/gpu_check_report.py check           # dry run: every step's code is here and importable
    python scripts/gpu_check_report.py assemble OUT    # OUT/*.out, *.status, gpu-tests.xml -> OUT/gpu_check.json
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
# What each step runs (modules imported, files executed), checked by `check`.
STEP_MODULES = {
    "environment": [],
    "tests": ["pytest"],
    "throughput": ["benchmarks.gpu_throughput"],
    "vs_vllm": ["benchmarks.engine_sessions", "engine.cli.bench"],
    "maxsim": ["benchmarks.workloads.maxsim_bench"],
    "bm25": ["benchmarks.workloads.bm25_bench", "kernels.bm25_triton"],
}
STEP_FILES = ["benchmarks/bench_maxsim.py", "benchmarks/vllm_peer.py", "scripts/gpu_check.sh"]


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
    """Dry run: every module a step imports is importable, every file it runs exists, the gpu tests collect."""
    sys.path.insert(0, str(ROOT))
    problems = []
    for step, modules in STEP_MODULES.items():
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception as error:
                problems.append(f"{step}: cannot import {module}: {type(error).__name__}: {error}")
    problems += [f"missing file {name}" for name in STEP_FILES if not (ROOT / name).is_file()]
    from engine.cli.bench import bench_engine

    if "vllm_python" not in bench_engine.__code__.co_varnames:
        problems.append("vs_vllm: `dossier bench engine` has no --vllm-python option")
    collect = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu",
                              "-p", "no:cacheprovider", "tests"], cwd=ROOT, capture_output=True, text=True)
    tests = [line for line in collect.stdout.splitlines() if "::" in line]
    if collect.returncode not in (0, 5) or not tests:
        problems.append(f"tests: collecting the gpu-marked tests failed: {collect.stdout[-500:]}{collect.stderr[-500:]}")
    files = sorted({t.split("::")[0] for t in tests})
    print(f"[dry-run] tests: {len(tests)} gpu-marked tests collected in {len(files)} files: {', '.join(files)}")
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


def assemble(out: Path) -> None:
    steps = {}
    for line in (out / "steps.tsv").read_text().splitlines():
        name, status, seconds, limit = line.split("\t")
        log = out / f"{name}.log"
        entry = {"status": status, "seconds": int(seconds), "limit_s": int(limit),
                 "result": _last_json(out / f"{name}.out")}
        if status != "ok" and log.is_file():
            entry["log_tail"] = log.read_text(errors="replace")[-2000:]
        steps[name] = entry
    report = {"steps": steps, "tests": _tests(out / "gpu-tests.xml"),
              "environment": (steps.get("environment") or {}).get("result"),
              "seconds_total": sum(s["seconds"] for s in steps.values())}
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2))


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "environment":
        print(json.dumps(environment()))
    elif command == "check":
        sys.exit(check())
    elif command == "assemble" and len(sys.argv) == 3:
        assemble(Path(sys.argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
