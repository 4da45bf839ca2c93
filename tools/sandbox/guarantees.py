"""What the sandbox can promise on this machine, found by running one program in it.

`sandbox_guarantees()` starts a sandbox once per process and reads back what its
confinement achieved (network namespace, user switch, kernel limits, Python policy). Each
guarantee is (name, held, how): `dossier version` prints them, and the workflow agent
records them in run.json, so a run says what protected it.
"""

from __future__ import annotations

import functools

from tools.sandbox.limits import SandboxLimits
from tools.sandbox.run import SANDBOX_UID, run_python

__all__ = ["Guarantee", "sandbox_guarantees"]

Guarantee = tuple[str, bool, str]  # (what, held on this machine, how it is enforced or why not)

_PROBE = "print(sum(range(10)))"


def _importable(limits: SandboxLimits) -> list[str]:
    """The whitelisted modules installed here."""
    import importlib.util

    return [name for name in limits.modules if importlib.util.find_spec(name) is not None]


@functools.cache
def sandbox_guarantees() -> tuple[Guarantee, ...]:
    """Run a probe program once and turn the child's report into guarantees."""
    limits = SandboxLimits()
    result = run_python(_PROBE, limits=limits)
    status = result.status
    if not status:
        why = result.error or "no report from the sandbox"
        return (("sandbox starts", False, why),)
    network = str(status.get("network", ""))
    user = str(status.get("user", ""))
    applied = status.get("limits", {})
    out: list[Guarantee] = [
        ("separate process, fresh working directory deleted afterwards", True, "subprocess + tempfile, scrubbed env"),
        ("no network", not network.startswith("failed"),
         f"{network}; the socket module is refused in any case" if not network.startswith("failed")
         else f"network namespace {network}; only the Python policy refuses sockets"),
        ("no writes outside the working directory", user.startswith("uid"),
         f"runs as {user} (nobody), so the kernel refuses writes except to world-writable places such as /tmp; "
         "the Python policy refuses those" if user.startswith("uid")
         else f"{user}: only the Python policy refuses writes outside the directory"),
        ("no reads outside the working directory", bool(status.get("python_policy")),
         "Python audit hook (the interpreter's own library files stay readable); not enforced by the kernel"),
        ("CPU time limit", "cpu_seconds" in applied, f"RLIMIT_CPU {applied.get('cpu_seconds')} s"),
        ("wall-clock limit", True, f"parent kills the process group after {limits.wall_seconds:g} s"),
        ("memory limit", "memory_mb" in applied, f"RLIMIT_AS {applied.get('memory_mb')} MB"),
        ("open-file limit", "open_files" in applied, f"RLIMIT_NOFILE {applied.get('open_files')}"),
        ("no child processes", "processes" in applied and (user.startswith("uid") or user.startswith("unchanged")),
         f"RLIMIT_NPROC {applied.get('processes')} for uid {SANDBOX_UID if user.startswith('uid') else 'of the caller'}"
         " + Python policy refuses fork/exec/spawn"),
        ("output cap", True, f"parent stops the program past {limits.output_bytes:,} bytes"),
        ("module whitelist", bool(status.get("python_policy")),
         "restricted import + audit hook on module loading: " + ", ".join(_importable(limits))),
    ]
    if result.stdout.strip() != "45":
        out.append(("probe program ran", False, result.error or f"printed {result.stdout[:60]!r}"))
    return tuple(out)
