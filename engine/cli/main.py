"""The `dossier` command: registers every command group and turns known errors into one line.

Run `dossier --help` for the list of commands; `DOSSIER_DEBUG=1 dossier ...` shows tracebacks.
"""

import logging
import os
import sys

import typer

from engine.cli import bench as bench_cli
from engine.cli import chat as chat_cli
from engine.cli import corpus as corpus_cli
from engine.cli import data as data_cli
from engine.cli import eval as eval_cli
from engine.cli import info as info_cli
from engine.cli import run as run_cli
from engine.cli import search as search_cli
from engine.cli import serve as serve_cli
from engine.cli import studio as studio_cli
from engine.cli import tools as tools_cli
from engine.cli import train as train_cli
from engine.cli.options import resumable

app = typer.Typer(
    name="dossier",
    help="Document agents over PDF collections, offline, on open-weight models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Document agents over PDF collections, offline, on open-weight models.

    Typical session: dossier sample --out s; dossier ingest s/pdfs --corpus c;
    dossier index --corpus c; dossier search --corpus c "revenue 2023".
    """


# Each command group lives in its own module with a `register(app)` function.
for _module in (corpus_cli, search_cli, data_cli, run_cli, eval_cli, tools_cli, chat_cli, serve_cli, bench_cli, info_cli,
                studio_cli, train_cli):
    _module.register(app)

# Commands whose finished work survives Ctrl-C, so the interrupt says how to resume: run (committed
# episodes), ingest (stored documents), index (--late's encoded pages), trajectories mine (mined episodes),
# eval score (the judge cache). Not serve, chat or studio: Ctrl-C is how one stops them.
RESUMABLE = ("run", "ingest", "index", "trajectories mine", "eval score")


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


_mark_resumable(app, RESUMABLE)


def main() -> None:
    """Console-script entry: run the app, printing user errors as one line with exit code 1."""
    from tools.errors import DossierError

    logging.basicConfig(level=os.environ.get("DOSSIER_LOG", "WARNING"), format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' "Loading weights" bars
    try:
        app()
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
