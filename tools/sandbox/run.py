"""Run a model-written Python program in a sandbox and report what happened in one line.

    from tools.sandbox import run_python
    result = run_python("print(sum(r['value'] for r in records))", inputs={"records": rows})
    result.ok, result.stdout, result.error     # True, "42.5\\n", None

The program runs in a separate process (tools/sandbox/bootstrap.py) in a fresh temporary
working directory that is deleted afterwards. This side enforces what the child cannot:
the wall clock and the output cap (both end the program's whole process group), a scrubbed
environment, and no inherited file descriptors. Nothing a program does raises here: every
failure is a `SandboxResult` with `ok=False`, a `kind` and a one-line `error`.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.sandbox.limits import OPTIONAL_MODULES, SandboxLimits

__all__ = ["SandboxResult", "run_python", "SANDBOX_UID"]

SANDBOX_UID = 65534  # "nobody": the user a root parent drops the program to
BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(slots=True)
class SandboxResult:
    ok: bool  # the program exited 0 within every limit
    stdout: str  # what it printed (cut at the output cap)
    stderr: str  # its error output: a short traceback when it raised
    kind: str | None  # None when ok; else exception | memory | cpu | timeout | output | exit | signal | setup
    error: str | None  # one line saying what went wrong, for the model and the trajectory
    exit_code: int | None  # the process's exit status (negative: killed by that signal)
    wall_s: float  # seconds from start to exit
    cpu_s: float  # CPU seconds the program used (user + system)
    status: dict = field(default_factory=dict)  # what the child's confinement reported (see bootstrap.py)

    def to_json(self) -> dict:
        return {"ok": self.ok, "stdout": self.stdout, "stderr": self.stderr, "kind": self.kind, "error": self.error,
                "exit_code": self.exit_code, "wall_s": round(self.wall_s, 3), "cpu_s": round(self.cpu_s, 3)}


def _module_paths(modules: tuple[str, ...]) -> list[str]:
    """Folders that hold the installed optional modules (the child runs with -S: no site-packages)."""
    import importlib.util

    paths = []
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
            continue
        origin = Path(spec.origin)
        folder = origin.parent.parent if origin.name == "__init__.py" else origin.parent
        stdlib = Path(os.__file__).parent
        if folder != stdlib and str(folder) not in paths:
            paths.append(str(folder))
    return paths


def _imported(code: str) -> set[str]:
    """Top-level module names the program's import statements name (a program that does not parse: none)."""
    import ast

    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _prepare(workdir: Path, code: str, inputs: dict | None, files: dict | None, drop: bool) -> None:
    (workdir / "program.py").write_text(code, encoding="utf-8")
    if inputs:
        (workdir / "_inputs.json").write_text(json.dumps(inputs, ensure_ascii=False), encoding="utf-8")
    for name, content in (files or {}).items():
        target = (workdir / name).resolve()
        if target.parent != workdir.resolve():
            raise ValueError(f"sandbox input file {name!r} must be a plain file name")
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, str):
            target.write_text(content, encoding="utf-8")
        else:
            target.write_text(json.dumps(content, ensure_ascii=False), encoding="utf-8")
    if drop:
        for path in [workdir, *workdir.iterdir()]:
            os.chown(path, SANDBOX_UID, SANDBOX_UID)


def run_python(code: str, inputs: dict | None = None, files: dict | None = None,
               limits: SandboxLimits | None = None, network: bool = True) -> SandboxResult:
    """Run `code` in the sandbox.

    Args:
        code: the program's source.
        inputs: JSON-serialisable values the program sees as global variables (e.g. {"records": [...]}).
        files: extra files for the working directory: name -> str, bytes or a JSON-serialisable value.
        limits: resource limits and module whitelist (defaults: `SandboxLimits()`).
        network: leave the network (a new namespace); False only for tests of the other layers.

    Returns:
        a `SandboxResult`; `ok` is False with `kind` and `error` set for any failure.
    """
    limits = limits or SandboxLimits()
    drop = os.geteuid() == 0
    start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="dossier-sandbox-"))
    try:
        try:
            _prepare(workdir, code, inputs, files, drop)
        except (OSError, TypeError, ValueError) as err:
            return SandboxResult(False, "", "", "setup", f"could not prepare the sandbox: {err}", None, 0.0, 0.0)
        status_read, status_write = os.pipe()
        # the standard-library modules load in milliseconds; numpy and pandas only when the program imports them
        preload = [m for m in limits.modules if m not in OPTIONAL_MODULES or m in _imported(code)]
        config = {"workdir": str(workdir), "limits": limits.to_json(), "paths": _module_paths(limits.modules),
                  "preload": preload,
                  "drop_to": [SANDBOX_UID, SANDBOX_UID] if drop else None, "status_fd": status_write,
                  "network": network}
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(BOOTSTRAP), json.dumps(config)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=workdir, env=dict(_ENV, HOME=str(workdir)), start_new_session=True,
                                    pass_fds=(status_write,))
        finally:
            os.close(status_write)
        stdout, stderr, stopped = _collect(proc, limits)
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        with os.fdopen(status_read, "rb") as pipe:
            raw_status = pipe.read()
        status = json.loads(raw_status) if raw_status else {}
        wall = time.perf_counter() - start
        out = stdout.decode("utf-8", "replace")
        err = stderr.decode("utf-8", "replace")
        kind, error = _diagnose(proc.returncode, err, stopped, limits, usage.ru_utime + usage.ru_stime, status)
        return SandboxResult(kind is None, out, err, kind, error, proc.returncode, wall,
                             usage.ru_utime + usage.ru_stime, status)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _collect(proc: subprocess.Popen, limits: SandboxLimits) -> tuple[bytes, bytes, str | None]:
    """Read stdout and stderr until both close; kill the process group at the wall clock or the output cap."""
    chunks = {proc.stdout: [], proc.stderr: []}
    total, stopped = 0, None
    deadline = time.monotonic() + limits.wall_seconds
    with selectors.DefaultSelector() as selector:
        for stream in chunks:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stopped = stopped or "timeout"
                _kill_group(proc)
                remaining = 1.0  # drain what is left after the kill
            for key, _ in selector.select(timeout=min(remaining, 0.5)):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                if total < limits.output_bytes:
                    chunks[key.fileobj].append(data[: limits.output_bytes - total])
                total += len(data)
                if total > limits.output_bytes and stopped is None:
                    stopped = "output"
                    _kill_group(proc)
            if stopped and time.monotonic() > deadline + 5:
                break  # a killed group that still holds the pipes open (cannot happen with RLIMIT_NPROC)
    for stream in chunks:
        stream.close()
    return b"".join(chunks[proc.stdout]), b"".join(chunks[proc.stderr]), stopped


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _diagnose(code: int, stderr: str, stopped: str | None, limits: SandboxLimits, cpu_s: float,
              status: dict) -> tuple[str | None, str | None]:
    """(kind, one-line error) for a finished run; (None, None) when it succeeded."""
    if stopped == "timeout":
        return "timeout", f"the program ran longer than {limits.wall_seconds:g} s of wall-clock time and was stopped"
    if stopped == "output":
        return "output", f"the program printed more than {limits.output_bytes:,} bytes and was stopped"
    if code == 0:
        return None, None
    # SIGXCPU at the soft limit; SIGKILL at the hard one (soft + 1 s) when the program ignored it
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL and cpu_s >= limits.cpu_seconds):
        return "cpu", f"the program used more than {limits.cpu_seconds} s of CPU time and was stopped"
    if not status:
        return "setup", f"the sandbox did not start (exit {code}): {_last_line(stderr) or 'no message'}"
    if code < 0:
        return "signal", f"the program was killed by signal {signal.Signals(-code).name}"
    last = _last_line(stderr)
    if last.startswith("MemoryError"):
        return "memory", f"MemoryError: the program needed more than its {limits.memory_mb} MB memory limit"
    if last and ("Error" in last.split(":")[0] or "Exception" in last.split(":")[0]):
        return "exception", last
    return "exit", f"the program exited with status {code}" + (f": {last}" if last else "")
