"""`setting(default, help)`: a settings dataclass field carrying its `dossier run` option.

Its own module, with nothing but dataclasses, so an agent's file can declare its settings without
importing engine/agents/settings.py (which imports every agent's settings class).
"""

from __future__ import annotations

from dataclasses import MISSING, field

__all__ = ["setting"]


def setting(default, help: str, *, cli: bool = True, flags: tuple[str, ...] = (), cli_default=MISSING):
    """A settings field with its `dossier run` option.

    Args:
        default: the value when the option is not given.
        help: the option's --help text.
        cli: False: no `dossier run` option (set by code or tests only).
        flags: the option's spellings, the first shown first (default: the field's name with dashes,
            "--page-chars" for page_chars).
        cli_default: the option's default when it differs from `default` (None: "not given", which
            the agent's `check` resolves).
    """
    meta = {"help": help, "cli": cli, "flags": tuple(flags)}
    if cli_default is not MISSING:
        meta["cli_default"] = cli_default
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)
