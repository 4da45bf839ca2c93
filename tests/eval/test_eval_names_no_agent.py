"""Evaluation names no agent: what a run's agent needs from `dossier eval` it declares on its spec.

An agent's analyses (the closed-book guessability classes, ...) are report sections registered in
engine/eval/sections.py and asked for by `AgentSpec.analyses` (engine/agents/registry.py), so no module
under engine/eval branches on an agent's name or keeps a list of agents. Report keys and the records an
agent writes into its trajectories ("qguide", "workflow") are data formats, not branches, and are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

from engine.agents.registry import agent_names, agent_spec
from engine.eval.sections import declared_analyses, registered_sections

ROOT = Path(__file__).resolve().parents[2]


def offences(source: str, names: set[str], where: str = "<source>") -> list[str]:
    """Where `source` names an agent: a comparison of an agent with a constant or an AGENT list, or a module
    constant whose name says AGENT(S) and whose value holds an agent's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            text = ast.unparse(node)
            constants = {c.value for side in (node.left, *node.comparators) for c in ast.walk(side)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            lists = [n.id for side in (node.left, *node.comparators) for n in ast.walk(side)
                     if isinstance(n, ast.Name) and "AGENT" in n.id]
            if "agent" in text.lower() and (constants & names or lists):
                found.append(f"{where}:{node.lineno}: {text}")
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            held = {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
            if any("AGENT" in t.upper() for t in targets) and held & names:
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_under_engine_eval_names_an_agent():
    names = set(agent_names()) | {"human"}  # the studio's people write trajectories as an agent too
    found = []
    for path in sorted((ROOT / "engine" / "eval").rglob("*.py")):
        found += offences(path.read_text(encoding="utf-8"), names, str(path.relative_to(ROOT)))
    assert not found, "engine/eval names agents (declare it on the agent's spec instead):\n" + "\n".join(found)


def test_the_check_catches_what_evaluation_once_held():
    names = set(agent_names())
    once = ('CLOSED_BOOK_AGENTS = ("closed-book",)\n'
            'if agent in CLOSED_BOOK_AGENTS:\n    pass\n'
            'if config.agent == "qguide":\n    pass\n')
    assert len(offences(once, names)) == 3  # the list, the membership test and the comparison
    assert offences('report["qguide"] = record.get("workflow")\n', names) == []  # data keys are allowed


def test_an_agents_analyses_come_from_its_spec():
    sections = {section.name for section in registered_sections()}
    for name in agent_names():
        assert set(agent_spec(name).analyses) <= sections, f"{name} declares an analysis no section provides"
    assert "guessability" in declared_analyses("closed-book")
    assert declared_analyses("bm25") == () and declared_analyses(None) == () and declared_analyses("gone") == ()
