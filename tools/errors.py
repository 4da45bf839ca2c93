"""Errors a user can act on.

Every layer (tools, models, engine) raises these for bad input; the CLI turns
them into one clear line and exit code 1. Internal invariants use `assert`.
"""

__all__ = ["DossierError", "MissingDependencyError", "missing_dependency"]


class DossierError(Exception):
    """Bad input or a state the user can fix; the message says what to do."""


class MissingDependencyError(DossierError, ImportError):
    """An optional backend is not installed; the message names the install command."""


def missing_dependency(what: str, install: str) -> MissingDependencyError:
    """Build the error for a missing optional backend.

    Args:
        what: the backend that is missing, e.g. "flash-attn".
        install: the exact command that installs it.
    """
    return MissingDependencyError(f"{what} is not installed; install it with: {install}")
