"""A sandbox for model-written Python: a confined process, kernel limits, a module whitelist."""

from tools.sandbox.guarantees import Guarantee, sandbox_guarantees
from tools.sandbox.limits import DEFAULT_MODULES, OPTIONAL_MODULES, SandboxLimits
from tools.sandbox.run import SandboxResult, run_python

__all__ = ["DEFAULT_MODULES", "Guarantee", "OPTIONAL_MODULES", "SandboxLimits", "SandboxResult", "run_python",
           "sandbox_guarantees"]
