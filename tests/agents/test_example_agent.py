"""Adding an agent is one file plus one registration line; nothing outside an agent's files tests its name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine.agents import registry
from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.registry import AgentSpec, agent_names, agent_spec
from engine.agents.runner import RolloutRunner
from engine.agents.settings import build_settings_class
from engine.eval import EvalConfig, evaluate
from tools.errors import DossierError
from tests.agents.scripted import build_corpus, questions

ROOT = Path(__file__).resolve().parents[2]


LINE = AgentSpec("first-hit", "cites the first search hit", "tests.agents.example_agent:FirstHitEpisode",
                 settings="tests.agents.example_agent:FirstHitSettings")


def test_a_tiny_agent_is_one_file_and_one_line_and_runs_through_runner_and_eval(tmp_path, monkeypatch):
    monkeypatch.setitem(registry._AGENTS, LINE.name, LINE)  # the one line, as _REGISTERED would hold it
    settings_class = build_settings_class(registry.registered())  # what engine.agents.settings builds at import
    out = tmp_path / "run"
    summary = RolloutRunner(ScriptedBackend(lambda *_: "unused"), settings_class(agent="first-hit"),
                            AgentEnv(build_corpus(tmp_path / "c")), out).run(questions(3))
    assert summary.episodes == 3 and summary.reasons == {"answered": 3}
    result = evaluate(questions(3), *_run_files(out), EvalConfig())
    assert len(result.items) == 3
    assert [i.page_f1 for i in result.items if i.id == "q1"] == [1.0]  # q1's gold page is the first hit


def test_the_tiny_agents_setting_is_a_dossier_run_option_checked_by_its_own_class(monkeypatch):
    import typer
    from typer.testing import CliRunner

    from engine.cli import run as run_cli

    monkeypatch.setitem(registry._AGENTS, LINE.name, LINE)
    settings_class = build_settings_class(registry.registered())
    assert settings_class(agent="first-hit", hit_rank=2).hit_rank == 2
    with pytest.raises(DossierError, match="--hit-rank must be at least 1"):
        settings_class(agent="first-hit", hit_rank=0)
    app = typer.Typer()
    app.command("other")(lambda: None)  # two commands, so `run` is a subcommand as in `dossier`
    run_cli.register(app)
    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "--agent first-hit" in shown and "--hit-rank" in shown and "which hit of the one search" in shown
    assert "first-hit: cites the first search hit" in shown  # the agents are listed from the registry, not by hand


def _run_files(out: Path):
    from engine.datasets import load_predictions
    from engine.eval.trajectories import load_trajectories

    predictions, errors = load_predictions(out / "predictions.jsonl")
    episodes, more = load_trajectories(out / "trajectories.jsonl")
    assert not errors and not more
    return predictions, episodes


def _own_files(name: str) -> Path:
    """An agent's own files: its factory's module, or the whole folder when that module sits in an agent package."""
    module = agent_spec(name).factory.partition(":")[0]
    path = ROOT / Path(*module.split(".")).with_suffix(".py")
    return path.parent if path.parent.name != "agents" else path


def test_no_module_outside_an_agents_own_files_tests_its_name():
    names = set(agent_names())
    offences = []
    for top in ("engine", "tools", "models", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "engine" / "agents" / "registry.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left, *node.comparators]
                tested = {c.value for side in sides for c in ast.walk(side)
                          if isinstance(c, ast.Constant) and c.value in names}
                if not tested or "agent" not in ast.unparse(node):
                    continue
                for name in tested:
                    own = _own_files(name)
                    if path != own and own not in path.parents:
                        offences.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not offences, "agent names tested outside the agents' own files:\n" + "\n".join(offences)
