"""Imports go one way between layers (scripts/check_layers.py): kernels ← tools/models ← engine core ←
agents/eval/... ← cli; benchmarks may import anything and only the CLI imports them."""

import shutil
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


check_layers = load_script("check_layers")


def test_the_repository_imports_go_one_way():
    violations = check_layers.check(ROOT)
    assert not violations, "\n".join(map(str, violations))


@pytest.mark.parametrize(("importer", "imported", "allowed"), [
    ("kernels.bm25", "tools.search", False),
    ("tools.search.searcher", "kernels.bm25", True),
    ("tools.late.rerank", "engine.datasets", False),
    ("models.decoder", "tools.errors", True),
    ("models.loading", "tools.progress", True),
    ("models.loading", "tools.corpus", False),
    ("tools.corpus.store", "models.base", False),
    ("engine.core.llm_engine", "models.base", True),
    ("engine.core.session", "engine.agents.runner", False),
    ("engine.datasets.formats", "engine.eval", False),
    ("engine.agents.runner", "engine.eval.items", True),
    ("engine.agents.runner", "engine.cli.run", False),
    ("engine.core.config", "engine", True),
    ("engine.eval.reports.files", "benchmarks.engine_sessions", False),
    ("engine.cli.bench", "benchmarks.engine_sessions", True),
    ("benchmarks.engine_sessions", "engine.cli.main", True),
])
def test_rules(importer, imported, allowed):
    assert (check_layers.rule_broken(importer, imported) is None) == allowed


def test_a_bad_import_anywhere_is_found_with_its_line(tmp_path):
    for top in check_layers.PACKAGES:
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    bad = tmp_path / "engine" / "core" / "scheduler.py"
    bad.write_text(bad.read_text() + "\n\ndef late():\n    from engine.agents import runner\n")
    relative = tmp_path / "kernels" / "maxsim.py"
    relative.write_text(relative.read_text() + "\nfrom ..tools.search import searcher\n")
    by_file = {v.path: v for v in check_layers.check(tmp_path)}
    assert set(by_file) == {"engine/core/scheduler.py", "kernels/maxsim.py"}
    assert by_file["engine/core/scheduler.py"].imported == "engine.agents"
    assert by_file["engine/core/scheduler.py"].line == len(bad.read_text().splitlines())
    assert by_file["kernels/maxsim.py"].imported == "tools.search"
