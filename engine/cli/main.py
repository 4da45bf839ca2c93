"""The `dossier` command: registers every command group and turns known errors into one line.

Run `dossier --help` for the list of commands; `DOSSIER_DEBUG=1 dossier ...` shows tracebacks.
"""

import logging
import os
import sys

import typer

from engine.cli.options import resumable

# Each command group lives in its own module with a `register(app)` function; in this order on `--help`.
MODULES = ("corpus", "search", "data", "run", "eval", "tools", "chat", "serve", "bench", "info", "studio", "train")
# The top-level commands and groups each module registers (tests/test_cli_startup.py checks the table against what
# `register` adds): `dossier search ...` builds only its own module's commands. Building all of them costs a short
# command about half its run (the run command's options import every agent's settings; Typer converts each command).
COMMANDS = {"ingest": "corpus", "corpus": "corpus", "index": "search", "search": "search", "retrieval-eval": "search",
            "import": "data", "sample": "data", "run": "run", "eval": "eval", "tools": "tools", "chat": "chat",
            "serve": "serve", "bench": "bench", "version": "info", "studio": "studio", "train": "train",
            "trajectories": "train"}

# Commands whose finished work survives Ctrl-C, so the interrupt says how to resume: run (committed
# episodes), ingest (stored documents), index (--late's encoded pages), trajectories mine (mined episodes),
# eval score (the judge cache). Not serve, chat or studio: Ctrl-C is how one stops them.
RESUMABLE = ("run", "ingest", "index", "trajectories mine", "eval score")


def _root() -> None:
    """Document agents over PDF collections, offline, on open-weight models.

    Typical session: dossier sample --out s; dossier ingest s/pdfs --corpus c;
    dossier index --corpus c; dossier search --corpus c "revenue 2023".
    """


def build_app(command: str | None = None) -> typer.Typer:
    """The CLI: every command, or only the module of `command` (a top-level command's name) when it names one."""
    import importlib

    app = typer.Typer(
        name="dossier",
        help="Document agents over PDF collections, offline, on open-weight models.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    modules = (COMMANDS[command],) if command in COMMANDS else MODULES
    for name in modules:
        importlib.import_module(f"engine.cli.{name}").register(app)
    _mark_resumable(app, tuple(path for path in RESUMABLE if COMMANDS[path.split()[0]] in modules))
    return app


def _mark_resumable(root: typer.Typer, paths: tuple[str, ...]) -> None:
    """Wrap each listed command's callback with options.resumable (a listed name that is missing is a bug)."""
    for path in paths:
        *groups, name = path.split()
        group = root
        for part in groups:
            group = next((info.typer_instance for info in group.registered_groups if info.name == part), None)
            assert group is not None, f"RESUMABLE names {path!r}, but there is no command group {part!r}"
        command = next((info for info in group.registered_commands if info.name == name), None)
        assert command is not None, f"RESUMABLE names {path!r}, which is not a registered command"
        command.callback = resumable(command.callback)


def __getattr__(name: str):
    """`app`: the whole CLI, built on first use (tests and `python -m engine.cli.main` use it; `main` builds less)."""
    if name == "app":
        globals()["app"] = build_app()
        return globals()["app"]
    raise AttributeError(name)


def main() -> None:
    """Console-script entry: run the app, printing user errors as one line with exit code 1."""
    from tools.errors import DossierError

    logging.basicConfig(level=os.environ.get("DOSSIER_LOG", "WARNING"), format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' "Loading weights" bars
    try:
        build_app(sys.argv[1] if len(sys.argv) > 1 else None)()
    except (DossierError, FileNotFoundError, PermissionError) as err:
        if os.environ.get("DOSSIER_DEBUG"):
            raise
        typer.secho(f"error: {err}", err=True, fg=typer.colors.RED)
        typer.echo("(set DOSSIER_DEBUG=1 to see the traceback)", err=True)
        sys.exit(1)
    # No KeyboardInterrupt handler here: typer turns Ctrl-C into exit 130 inside app(); the resumable
    # commands print their hint themselves (RESUMABLE above).


if __name__ == "__main__":
    main()
