"""What a sandboxed program may use: resource limits and the module whitelist.

Every model-written program runs under one `SandboxLimits` (tools/sandbox/run.py). The
defaults suit the workflow agent's code stage: a few lines of arithmetic over a records
table, finished in well under a second.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tools.errors import DossierError

__all__ = ["SandboxLimits", "DEFAULT_MODULES", "OPTIONAL_MODULES"]

# Standard-library modules a program may import (and their submodules).
DEFAULT_MODULES = ("math", "statistics", "json", "re", "datetime", "decimal", "fractions", "collections",
                   "itertools", "functools", "operator", "string")
# Allowed too when installed (they are imported before the program starts, so their own
# imports happen outside the policy).
OPTIONAL_MODULES = ("numpy", "pandas")


@dataclass(slots=True)
class SandboxLimits:
    """Limits of one sandboxed run; each is enforced by the kernel (`resource`) or by the parent."""

    cpu_seconds: int = 10  # CPU time (RLIMIT_CPU); the kernel ends the program past it
    wall_seconds: float = 30.0  # wall-clock time; the parent kills the program's process group past it
    memory_mb: int = 1024  # address space (RLIMIT_AS), MiB; a bigger allocation raises MemoryError
    output_bytes: int = 1_000_000  # stdout + stderr kept; more ends the program
    open_files: int = 64  # file descriptors (RLIMIT_NOFILE)
    processes: int = 1  # processes of the sandbox user (RLIMIT_NPROC): 1 = no child processes
    file_bytes: int = 16_000_000  # size of any file the program writes (RLIMIT_FSIZE), bytes
    modules: tuple[str, ...] = field(default=DEFAULT_MODULES + OPTIONAL_MODULES)  # importable top-level modules
    python_policy: bool = True  # import whitelist + audit hooks; False only to test the OS layer alone
    # where no kernel boundary (bubblewrap) is available, run anyway with only the in-process policy and the
    # rlimits; the caller's explicit choice (dossier run --allow-unsandboxed-code), never a silent fallback
    allow_unsandboxed: bool = False

    def __post_init__(self):
        for name in ("cpu_seconds", "memory_mb", "output_bytes", "open_files", "processes", "file_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise DossierError(f"sandbox limit {name} must be a positive integer, got {value!r}")
        if self.wall_seconds <= 0:
            raise DossierError(f"sandbox limit wall_seconds must be positive, got {self.wall_seconds!r}")
        if self.memory_mb < 64:
            raise DossierError(f"sandbox memory_mb must be at least 64 (the interpreter needs it), got {self.memory_mb}")
        if self.open_files < 16:
            raise DossierError(f"sandbox open_files must be at least 16 (the interpreter needs them), got {self.open_files}")
        self.modules = tuple(self.modules)

    def to_json(self) -> dict:
        return asdict(self)
