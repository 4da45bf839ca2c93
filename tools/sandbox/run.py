"""Run a model-written Python program in a sandbox and report what happened in one line.

    from tools.sandbox import run_python
    result = run_python("print(sum(r['value'] for r in records))", inputs={"records": rows})
    result.ok, result.stdout, result.error     # True, "42.5\\n", None

The program runs in a separate process (tools/sandbox/bootstrap.py) in a fresh temporary
working directory that is deleted afterwards, inside the kernel boundary of
tools/sandbox/boundary.py (bubblewrap's namespaces: only the Python installation and that
directory exist for it, no other process is visible) with rlimits and a seccomp filter. This
side enforces what the child cannot: the wall clock and the output cap (both end the program's
whole process group), a scrubbed environment, and no inherited file descriptors. Where no
kernel boundary is available the program is refused (kind "setup", the message names what to
install) unless `SandboxLimits.allow_unsandboxed` says the caller accepts an in-process-only
sandbox. Nothing a program does raises here: every failure is a `SandboxResult` with
`ok=False`, a `kind` and a one-line `error`.
"""

from __future__ import annotations

import functools
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

from tools.sandbox.boundary import INSTALL_HINT, bwrap_command, kernel_boundary
from tools.sandbox.limits import OPTIONAL_MODULES, SandboxLimits
from tools.sandbox.seccomp import build_filter

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
    """Run `code` in the sandbox. Never raises: a failure of the program or of the sandbox is a result.

    Args:
        code: the program's source.
        inputs: JSON-serialisable values the program sees as global variables (e.g. {"records": [...]}).
        files: extra files for the working directory: name -> str, bytes or a JSON-serialisable value.
        limits: resource limits and module whitelist (defaults: `SandboxLimits()`).
        network: where no kernel boundary holds, leave the network from the child (a new namespace); False
            only for tests of the other layers. Under bubblewrap the program never has a network.

    Returns:
        a `SandboxResult`; `ok` is False with `kind` and `error` set for any failure.
    """
    limits = limits or SandboxLimits()
    start = time.perf_counter()
    try:
        return _run(code, inputs, files, limits, network, start)
    except Exception as err:  # noqa: BLE001 - the promise: a broken sandbox is a result, never an exception
        return SandboxResult(False, "", "", "setup", f"the sandbox failed: {type(err).__name__}: {err}", None,
                             time.perf_counter() - start, 0.0)


def _refusal(why: str, start: float) -> SandboxResult:
    return SandboxResult(False, "", "", "setup", f"model-written code is not run without a kernel sandbox, and this "
                         f"machine has none ({why}); {INSTALL_HINT}, or allow an unsandboxed run explicitly "
                         "(dossier run --allow-unsandboxed-code)", None, time.perf_counter() - start, 0.0)


def _run(code: str, inputs: dict | None, files: dict | None, limits: SandboxLimits, network: bool,
         start: float) -> SandboxResult:
    boundary = kernel_boundary()
    if not boundary.held and not limits.allow_unsandboxed:
        return _refusal(boundary.how, start)
    # a root parent hands the program to nobody (the bootstrap switches after set-up); an ordinary parent's
    # bubblewrap maps nobody to the parent's own uid in a user namespace, so its files need no new owner
    drop = os.geteuid() == 0
    _sweep_orphans()
    workdir = Path(tempfile.mkdtemp(prefix=f"dossier-sandbox-{os.getpid()}-"))
    try:
        try:
            _prepare(workdir, code, inputs, files, drop)
        except (OSError, TypeError, ValueError) as err:
            return SandboxResult(False, "", "", "setup", f"could not prepare the sandbox: {err}", None, 0.0, 0.0)
        status_read, status_write = os.pipe()
        # the standard-library modules load in milliseconds; numpy and pandas only when the program imports them
        preload = [m for m in limits.modules if m not in OPTIONAL_MODULES or m in _imported(code)]
        paths = _module_paths(limits.modules)
        seccomp = build_filter()
        config = {"workdir": str(workdir), "limits": limits.to_json(), "paths": paths, "preload": preload,
                  "drop_to": [SANDBOX_UID, SANDBOX_UID] if drop else None, "status_fd": status_write,
                  "network": network, "boundary": "bubblewrap" if boundary.held else None,
                  "seccomp": seccomp[0].hex() if seccomp else None, "seccomp_calls": seccomp[1] if seccomp else 0}
        python = [os.path.realpath(sys.executable), "-I", "-S", str(BOOTSTRAP), json.dumps(config)]
        if boundary.held:
            python = bwrap_command(boundary.command, str(workdir), [str(BOOTSTRAP), *paths], drop) + python
        try:
            proc = subprocess.Popen(python,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    cwd=workdir, env=dict(_ENV, HOME=str(workdir)), start_new_session=True,
                                    pass_fds=(status_write,))
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        try:
            run = _collect(proc, status_read, limits, time.monotonic() + limits.wall_seconds)
        finally:
            os.close(status_read)
            _kill_group(proc.pid)
            _reap(proc)  # whatever happened above, no process outlives this call
        if boundary.held and run.exit_code > 128:  # bubblewrap exits 128 + N when signal N ended the program
            run.exit_code = 128 - run.exit_code
        status, outcome = _read_status(run.status)
        wall = time.perf_counter() - start
        out = run.stdout.decode("utf-8", "replace")
        err = run.stderr.decode("utf-8", "replace")
        traceback = None if outcome is None else _program_frames(outcome[1], str(workdir / "program.py"))
        if traceback:
            err += ("" if not err or err.endswith("\n") else "\n") + traceback
        cpu = run.usage.ru_utime + run.usage.ru_stime
        kind, error = _diagnose(run.exit_code, err, run.stopped, limits, cpu, status, traceback or "",
                                memory=outcome is not None and outcome[0])
        return SandboxResult(kind is None, out, err, kind, error, run.exit_code, wall, cpu, status)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@functools.cache
def _sweep_orphans() -> None:
    """Remove, once per process, working directories left by parents that were killed (SIGKILL runs no clean-up).

    A directory is named after the pid of the process that made it; one whose process is gone is an orphan.
    """
    for path in Path(tempfile.gettempdir()).glob("dossier-sandbox-*-*"):
        owner = path.name.split("-")[2]
        if not owner.isdigit() or int(owner) == os.getpid():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:  # alive, another user's
            continue


@dataclass(slots=True)
class _Run:
    stdout: bytes
    stderr: bytes
    status: bytes  # what came on the status pipe (the child's report, then its outcome line)
    stopped: str | None  # "timeout" or "output" when the parent ended the program
    exit_code: int
    usage: object  # resource.struct_rusage of the reaped process


def _collect(proc: subprocess.Popen, status_fd: int, limits: SandboxLimits, deadline: float) -> _Run:
    """Read the three pipes until the process exits; kill its process group at the wall clock or output cap.

    The deadline bounds the whole run, whatever the pipes do: a program that closes its output and
    blocks is killed at the deadline like one that spins.
    """
    names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr", status_fd: "status"}
    chunks = {"stdout": [], "stderr": [], "status": []}
    sizes = {"stdout": 0, "stderr": 0, "status": 0}
    stopped = None
    pidfd = _pidfd(proc.pid)
    with selectors.DefaultSelector() as selector:
        for fd in names:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ)
        try:
            while not _exited(proc.pid):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    stopped = stopped or "timeout"
                    break
                for key, _ in selector.select(timeout=min(remaining, 0.5 if pidfd is not None else 0.05)):
                    if key.fd in names:
                        _read_into(key.fd, names[key.fd], chunks, sizes, selector)
                if sizes["stdout"] + sizes["stderr"] > limits.output_bytes:
                    stopped = "output"
                    break
        finally:
            if pidfd is not None:
                os.close(pidfd)
        _kill_group(proc.pid)  # the program and anything it started, exited or not
        exit_code, usage = _reap(proc)
        for fd in list(names):  # what the pipes still hold: every writer is gone now
            if fd in selector.get_map():
                while _read_into(fd, names[fd], chunks, sizes, selector):
                    pass
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    out, err = b"".join(chunks["stdout"]), b"".join(chunks["stderr"])
    cap = limits.output_bytes
    return _Run(out[:cap], err[: max(0, cap - len(out))], b"".join(chunks["status"]), stopped, exit_code, usage)


_STATUS_CAP = 1 << 20  # the status pipe carries a report and a traceback; more is the program writing junk


def _read_into(fd: int, name: str, chunks: dict, sizes: dict, selector) -> bool:
    """Read what `fd` has now; False once it is closed or empty for the moment."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return False
    if not data:
        selector.unregister(fd)
        return False
    cap = _STATUS_CAP if name == "status" else 1 << 62
    if sizes[name] < cap:
        chunks[name].append(data)
    sizes[name] += len(data)
    return True


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits (Linux 5.3+), or None: then the loop polls."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _exited(pid: int) -> bool:
    """Whether `pid` has exited, without reaping it (so its process group id stays reserved for the kill)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _reap(proc: subprocess.Popen) -> tuple[int, object]:
    """Wait for the (killed or exited) process; its exit code (negative: a signal) and resource usage."""
    if proc.returncode is not None:
        return proc.returncode, getattr(proc, "_dossier_usage", None)
    try:
        _, wait_status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped already (cannot happen unless someone else waited for it)
        import resource

        proc.returncode = -signal.SIGKILL
        return proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN)
    proc.returncode = os.waitstatus_to_exitcode(wait_status)
    proc._dossier_usage = usage
    return proc.returncode, usage


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_status(raw: bytes) -> tuple[dict, tuple[bool, str] | None]:
    """The child's confinement report and, when the program raised, (MemoryError?, traceback).

    Only the lines carrying the key the child sent first count: the program can write to the
    pipe but cannot know the key.
    """
    first, _, rest = raw.partition(b"\n")
    try:
        status = json.loads(first)
    except ValueError:
        return {}, None
    if not isinstance(status, dict):
        return {}, None
    key = str(status.pop("key", "")).encode()
    if not key or b"\n" + key + b" " not in rest:
        return status, None
    flag, _, text = rest.rpartition(b"\n" + key + b" ")[2].partition(b" ")
    return status, (flag == b"1", text.decode("utf-8", "replace"))


def _program_frames(traceback: str, program: str) -> str:
    """The interpreter's traceback with only the program's own frames (the bootstrap and library frames dropped)."""
    kept, keep = [], True
    for line in traceback.splitlines(keepends=True):
        if line.startswith('  File "'):
            keep = line.startswith(f'  File "{program}"')
        elif not line.startswith("    "):
            keep = True  # a header, a chain separator or the exception line
        if keep:
            kept.append(line.replace(program, "program.py"))
    return "".join(kept)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _exception_line(traceback: str) -> str:
    """'Type: message' of the exception that ended the program: the first line after the last traceback's frames."""
    lines = traceback.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    for line in lines[headers[-1] + 1 if headers else 0:]:
        if line.strip() and not line.startswith("  "):
            return line.strip()
    return _last_line(traceback)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        low, high = getattr(signal, "SIGRTMIN", 34), getattr(signal, "SIGRTMAX", 64)
        return f"SIGRTMIN+{number - low} (signal {number})" if low <= number <= high else f"signal {number}"


def _diagnose(code: int, stderr: str, stopped: str | None, limits: SandboxLimits, cpu_s: float,
              status: dict, traceback: str = "", memory: bool = False) -> tuple[str | None, str | None]:
    """(kind, one-line error) for a finished run from what the parent observed; (None, None) when it succeeded.

    Args:
        code: the exit status (negative: the signal that ended it).
        stderr: what the process wrote to stderr (only read when the sandbox did not start).
        traceback: the program's traceback from the child's keyed outcome line ("" when it did not raise).
        stopped: "timeout" or "output" when the parent stopped it.
        memory: the outcome line said the exception was a MemoryError.
    """
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
        return "setup", f"the sandbox did not start (exit {code}): {_last_line(stderr)[:300] or 'no message'}"
    if code < 0:
        return "signal", f"the program was killed by {_signal_name(-code)}"
    if memory and code == 1:
        return "memory", f"MemoryError: the program needed more than its {limits.memory_mb} MB memory limit"
    if traceback and code == 1:
        return "exception", _exception_line(traceback)[:500] or "the program raised an exception"
    return "exit", f"the program exited with status {code}"
