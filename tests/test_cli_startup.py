"""Commands that need no model never import torch (about a second of a cold start on the project's CPUs), and
one `dossier search` on the CPU imports neither numba nor bm25s (their imports and numba's cached kernel were
0.3-0.5 s of a 0.8 s cold query on an AMD EPYC; numpy scores one query in far less, with the same bits), nor
pydantic (typer 0.29 validates every option through pydantic: 0.17 s of CPU a start; pyproject pins typer below it),
nor the other commands (engine/cli/main.py builds only the named command's module: the run command's options import
every agent's settings, and Typer converts each command it holds)."""

import subprocess
import sys

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets.formats import write_jsonl
from tests.agents.scripted import build_corpus, questions, search_then_answer

WATCH = ("import atexit, sys; atexit.register(lambda: print('TORCH_LOADED', 'torch' in sys.modules, "
         "'NUMBA_LOADED', 'numba' in sys.modules, 'BM25S_LOADED', 'bm25s' in sys.modules, "
         "'SETTINGS_LOADED', 'engine.agents.settings' in sys.modules, 'PYDANTIC_LOADED', 'pydantic' in sys.modules, "
         "file=sys.stderr)); "
         "from engine.cli.main import main; sys.argv = ['dossier'] + sys.argv[1:]; main()")


def _dossier(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WATCH, *args], capture_output=True, text=True, timeout=300)


def test_dossier_search_and_eval_do_not_import_torch(tmp_path):
    corpus = build_corpus(tmp_path / "corpus")
    search = _dossier("search", "--corpus", str(corpus), "revenue 2019")
    assert search.returncode == 0, search.stderr
    assert "report" in search.stdout
    assert ("TORCH_LOADED False NUMBA_LOADED False BM25S_LOADED False SETTINGS_LOADED False PYDANTIC_LOADED False"
            in search.stderr)
    run = tmp_path / "run"
    RolloutRunner(ScriptedBackend(search_then_answer), AgentSettings(), AgentEnv(corpus), run).run(questions(3))
    write_jsonl(tmp_path / "questions.jsonl", [q.to_json() for q in questions(3)])
    # --no-drift: query drift embeds the queries with MiniLM, a model (the one part of eval that needs torch)
    evaluated = _dossier("eval", str(run / "predictions.jsonl"), "--gold", str(tmp_path / "questions.jsonl"),
                         "--trajectories", str(run / "trajectories.jsonl"), "--out", str(tmp_path / "eval"),
                         "--no-drift", "--format", "json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert '"accuracy"' in evaluated.stdout
    assert "TORCH_LOADED False" in evaluated.stderr


def test_the_command_table_names_what_each_module_registers():
    """engine/cli/main.COMMANDS (which module a command's name builds) equals what each module's `register` adds, and
    a command built alone has the same options and help as in the whole CLI."""
    import importlib

    import typer
    from typer.main import get_command

    from engine.cli import main

    for module in main.MODULES:
        app = typer.Typer()
        importlib.import_module(f"engine.cli.{module}").register(app)
        names = {info.name for info in app.registered_commands} | {info.name for info in app.registered_groups}
        assert names == {name for name, owner in main.COMMANDS.items() if owner == module}, module
    whole = get_command(main.build_app())
    assert set(whole.commands) == set(main.COMMANDS)
    for name in ("search", "run", "eval"):
        alone = get_command(main.build_app(name))
        assert set(alone.commands) == {n for n, owner in main.COMMANDS.items() if owner == main.COMMANDS[name]}
        assert [p.name for p in alone.commands[name].params] == [p.name for p in whole.commands[name].params]
        assert alone.commands[name].help == whole.commands[name].help
