"""The kernel boundary around a sandboxed program: bubblewrap's namespaces.

A model-written program can rewrite its own interpreter's memory (numpy turns any address
into an array), so no check inside its process can hold. The boundary is the kernel's: each
program runs under bubblewrap (`bwrap`, the Flatpak sandbox) in fresh mount, PID, network, IPC,
UTS and cgroup namespaces, where

  - the file system is a fresh tmpfs holding only, read-only, the Python installation, the
    system's shared libraries and the folders of the modules it may import, plus its own
    working directory read-write: a file anywhere else is not there at all;
  - no other process is visible (its own PID namespace, a new session for the terminal), so
    it cannot signal, renice, pin, trace or write into its parent or another sandbox;
  - there is no network but its own loopback;
  - it runs as uid 65534 (nobody): with a root parent, a real switch to that uid after set-up
    (bubblewrap runs privileged and keeps only CAP_SETUID/CAP_SETGID for the bootstrap to drop);
    with an ordinary parent, a user namespace mapping 65534 to the parent's uid, no capabilities.

The child then adds rlimits and a seccomp filter (tools/sandbox/seccomp.py), and the Python
audit hook stays as defence in depth. `kernel_boundary()` probes once per process whether
bubblewrap works here; where it does not, run.py refuses model code unless the caller allows
an unsandboxed run (`SandboxLimits.allow_unsandboxed`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Boundary", "kernel_boundary", "bwrap_command", "require_kernel_boundary", "INSTALL_HINT"]

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
                "it needs unprivileged user namespaces, or root)")
_LIBRARY_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32")
_FILES = ("/etc/ld.so.cache",)  # lets the dynamic loader find system libraries without searching


@dataclass(frozen=True, slots=True)
class Boundary:
    """Whether the kernel boundary holds on this machine, and how (or why not)."""

    held: bool  # bubblewrap ran a probe program in fresh namespaces
    how: str  # e.g. "bubblewrap 0.8.0 (/usr/bin/bwrap): mount, PID, network, IPC, UTS namespaces ..." or the reason
    command: str | None = None  # the bwrap executable when held


def _interpreter() -> str:
    """The real interpreter binary (a virtualenv's python is a link to it)."""
    return os.path.realpath(sys.executable)


def _read_only_paths(extra: list[str]) -> list[str]:
    """Folders and files bound read-only: the interpreter's installation, shared libraries, module folders."""
    wanted = [os.path.realpath(sys.base_prefix), os.path.dirname(_interpreter()), *_FILES, *extra]
    paths: list[str] = []
    for path in wanted:
        if not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        if not any(real == p or real.startswith(p.rstrip("/") + "/") for p in paths):
            paths = [p for p in paths if not p.startswith(real.rstrip("/") + "/")] + [real]
    return paths


def bwrap_command(bwrap: str, workdir: str, read_only: list[str], as_root: bool) -> list[str]:
    """The bwrap arguments that confine one program (the python command line follows them).

    Args:
        bwrap: the bubblewrap executable.
        workdir: the program's working directory, bound read-write at the same path.
        read_only: further folders or files bound read-only at the same path (module folders, the bootstrap).
        as_root: the parent is root: bubblewrap runs privileged and the bootstrap switches to nobody itself.
    """
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox", "--cap-drop", "ALL"]
    if as_root:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    made: set[str] = set()

    def parents(path: str) -> list[str]:
        """World-traversable folders above a mount point (bwrap would copy the host's modes, e.g. /root's 0700)."""
        out = []
        for parent in reversed(Path(path).parents[:-1] if len(Path(path).parts) > 2 else ()):
            if str(parent) not in made:
                made.add(str(parent))
                out += ["--perms", "0755", "--dir", str(parent)]
        return out

    for path in _LIBRARY_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += parents(path) + ["--ro-bind", path, path]
    for path in _read_only_paths(read_only):
        args += parents(path) + ["--ro-bind", path, path]
    # a root parent's bwrap holds no CAP_DAC_OVERRIDE, so it cannot enter nobody's 0700 directory: the bootstrap
    # changes into it once it is nobody
    # the root tmpfs bubblewrap builds is read-only once set up, so the program cannot fill memory through it
    return args + parents(workdir) + ["--bind", workdir, workdir, "--proc", "/proc", "--dev", "/dev",
                                      "--remount-ro", "/", "--chdir", "/" if as_root else workdir]


def _version(bwrap: str) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "bubblewrap"
    return out or "bubblewrap"


@functools.cache
def kernel_boundary() -> Boundary:
    """Probe once whether bubblewrap confines a Python program here; the answer says why not when it cannot."""
    bwrap = shutil.which("bwrap") or next((p for p in ("/usr/bin/bwrap", "/bin/bwrap") if os.access(p, os.X_OK)), None)
    if bwrap is None:
        return Boundary(False, f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}")
    workdir = tempfile.mkdtemp(prefix="dossier-sandbox-probe-")
    try:
        as_root = os.geteuid() == 0
        if as_root:
            os.chown(workdir, 65534, 65534)
        command = bwrap_command(bwrap, workdir, [], as_root) + [
            _interpreter(), "-I", "-S", "-c", "import os; print(os.getpid())"]
        try:
            probe = subprocess.run(command, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                                   env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        except (OSError, subprocess.SubprocessError) as err:
            return Boundary(False, f"bubblewrap ({bwrap}) could not run: {err}")
        if probe.returncode != 0 or not probe.stdout.strip().isdigit():
            why = (probe.stderr.strip().splitlines() or ["no message"])[-1][:300]
            return Boundary(False, f"bubblewrap ({bwrap}) cannot create the sandbox's namespaces here: {why}; "
                                   "it needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) "
                                   "or root")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    user = "a switch to uid 65534 after set-up" if as_root else "uid 65534 in a user namespace, no capabilities"
    return Boundary(True, f"{_version(bwrap)} ({bwrap}): fresh mount, PID, network, IPC and UTS namespaces, "
                          f"{user}; only the Python installation (read-only) and the working directory are there",
                    bwrap)



def require_kernel_boundary(allow_unsandboxed: bool, who: str) -> None:
    """Refuse, before a run starts, to run model-written code without the kernel boundary, unless allowed.

    Args:
        allow_unsandboxed: the user passed --allow-unsandboxed-code.
        who: what would run the code, for the message (e.g. "the workflow agent").

    Raises:
        DossierError: no boundary here and no explicit permission.
    """
    from tools.errors import DossierError

    boundary = kernel_boundary()
    if not boundary.held and not allow_unsandboxed:
        raise DossierError(f"{who} runs model-written Python, and this machine has no kernel sandbox for it "
                           f"({boundary.how}). {INSTALL_HINT[0].upper() + INSTALL_HINT[1:]}; or pass "
                           "--allow-unsandboxed-code to run it with only the in-process policy and rlimits "
                           "(run.json records it)")
