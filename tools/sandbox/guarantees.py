"""What the sandbox can promise on this machine, found by running one program in it.

`sandbox_guarantees()` starts a sandbox once per process and reads back what its
confinement achieved (kernel boundary, network namespace, user switch, seccomp, kernel limits,
Python policy). Each guarantee is (name, held, how): `dossier version` prints them, and the
agents that run model code record them in run.json, so a run says what protected it.
"""

from __future__ import annotations

import functools

from tools.sandbox.boundary import kernel_boundary
from tools.sandbox.limits import SandboxLimits
from tools.sandbox.run import SANDBOX_UID, run_python

__all__ = ["Guarantee", "sandbox_guarantees", "run_meta"]

Guarantee = tuple[str, bool, str]  # (what, held on this machine, how it is enforced or why not)

_PROBE = "print(sum(range(10)))"


def _importable(limits: SandboxLimits) -> list[str]:
    """The whitelisted modules installed here."""
    import importlib.util

    return [name for name in limits.modules if importlib.util.find_spec(name) is not None]


@functools.cache
def sandbox_guarantees() -> tuple[Guarantee, ...]:
    """Run a probe program once and turn the child's report into guarantees.

    The probe runs even where no kernel boundary holds (allowing an unsandboxed run), so the report
    still says what the in-process layers give; the first guarantee says whether the boundary holds,
    and where it does not, model code is refused unless a run allows it explicitly.
    """
    boundary = kernel_boundary()
    limits = SandboxLimits(allow_unsandboxed=True)
    result = run_python(_PROBE, limits=limits)
    status = result.status
    kernel = ("kernel boundary", boundary.held,
              boundary.how if boundary.held else f"{boundary.how}; model-written code is refused unless a run passes "
                                                 "--allow-unsandboxed-code (run.json records it)")
    if not status:
        why = result.error or "no report from the sandbox"
        return kernel, ("sandbox starts", False, why)
    held = boundary.held and status.get("boundary") == "bubblewrap"
    network = str(status.get("network", ""))
    user = str(status.get("user", ""))
    seccomp = str(status.get("seccomp", ""))
    applied = status.get("limits", {})
    out: list[Guarantee] = [
        kernel,
        ("separate process, fresh working directory deleted afterwards", True, "subprocess + tempfile, scrubbed env"),
        ("no network", not network.startswith("failed"),
         f"{network}; the socket module is refused in any case" if not network.startswith("failed")
         else f"network namespace {network}; only the Python policy refuses sockets"),
        ("no writes outside the working directory", held or user.startswith("uid"),
         "nothing else is mounted writable (bubblewrap), and the program runs as nobody" if held
         else f"runs as {user} (nobody), so the kernel refuses writes except to world-writable places such as /tmp; "
              "the Python policy refuses those" if user.startswith("uid")
         else f"{user}: only the Python policy refuses writes outside the directory"),
        ("no reads outside the working directory", held or bool(status.get("python_policy")),
         "only the Python installation and the working directory exist in its mount namespace (bubblewrap)" if held
         else "Python audit hook only (the interpreter's own library files stay readable): a program that rewrites "
              "its interpreter's memory gets past it"),
        ("no other process reachable", held,
         "its own PID namespace and session: the parent and other sandboxes are not visible" if held
         else "not enforced: the program could signal, renice or trace processes of its own uid"),
        ("seccomp filter", seccomp.startswith("filter installed"),
         f"{seccomp}: no exec, fork, ptrace, process_vm_*, pidfd, setpriority, sched_set*, unshare, mount, bpf, ..."),
        ("CPU time limit", "cpu_seconds" in applied, f"RLIMIT_CPU {applied.get('cpu_seconds')} s"),
        ("wall-clock limit", True, f"parent kills the process group after {limits.wall_seconds:g} s"),
        ("memory limit", "memory_mb" in applied, f"RLIMIT_AS {applied.get('memory_mb')} MB"),
        ("open-file limit", "open_files" in applied, f"RLIMIT_NOFILE {applied.get('open_files')}"),
        ("no child processes", "processes" in applied and (user.startswith("uid") or user.startswith("unchanged")),
         f"RLIMIT_NPROC {applied.get('processes')} for uid {SANDBOX_UID if user.startswith('uid') else 'of the caller'}"
         + (", the seccomp filter refuses fork and exec" if seccomp.startswith("filter installed") else "")
         + " + Python policy refuses fork/exec/spawn"),
        ("output cap", True, f"parent stops the program past {limits.output_bytes:,} bytes"),
        ("module whitelist", bool(status.get("python_policy")),
         "restricted import + audit hook on module loading: " + ", ".join(_importable(limits))),
    ]
    if result.stdout.strip() != "45":
        out.append(("probe program ran", False, result.error or f"printed {result.stdout[:60]!r}"))
    return tuple(out)


def run_meta() -> dict:
    """run.json's "sandbox": what protected the model-written programs of a run (the agents' `run_meta`)."""
    return {"sandbox": [{"guarantee": what, "held": held, "how": how} for what, held, how in sandbox_guarantees()]}
