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
    ("engine.cli.search", "engine.cli.train", False),  # CLI modules share through options only
    ("engine.cli.bench", "engine.cli.options", True),
    ("engine.cli.main", "engine.cli.run", True),  # the entry point lists the command modules
    ("engine.agents.bm25", "engine.train.stop_rule", False),  # agents build on nothing of train/studio/Ray
    ("engine.agents.runner", "engine.studio.annotator", False),
    ("engine.agents.launch", "engine.distributed", False),
    ("engine.train.silver", "engine.agents.run_dir", True),
    ("engine.studio.annotator", "engine.agents.run_dir", True),
])
def test_rules(importer, imported, allowed):
    assert (check_layers.rule_broken(importer, imported) is None) == allowed


def test_a_bad_import_anywhere_is_found_with_its_line(tmp_path):
    _copy(tmp_path)
    before = {v.path for v in check_layers.check(tmp_path)}
    bad = tmp_path / "engine" / "core" / "scheduler.py"
    bad.write_text(bad.read_text() + "\n\ndef late():\n    from engine.agents import runner\n")
    relative = tmp_path / "kernels" / "maxsim.py"
    relative.write_text(relative.read_text() + "\nfrom ..tools.search import searcher\n")
    by_file = {v.path: v for v in check_layers.check(tmp_path) if v.path not in before}
    assert set(by_file) == {"engine/core/scheduler.py", "kernels/maxsim.py"}
    assert by_file["engine/core/scheduler.py"].imported == "engine.agents"
    assert by_file["engine/core/scheduler.py"].line == len(bad.read_text().splitlines())
    assert by_file["kernels/maxsim.py"].imported == "tools.search"


def _copy(tmp_path):
    for top in check_layers.PACKAGES:
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _added(root, path: str, line: str) -> list:
    """The violations a late `line` appended to `path` adds (whatever the copy held before)."""
    before = set(map(str, check_layers.check(root)))
    (root / path).write_text((root / path).read_text() + f"\n\ndef late():\n    {line}\n")
    return [v for v in check_layers.check(root) if str(v) not in before]


@pytest.mark.parametrize(("path", "line", "why"), [
    ("engine/cli/search.py", "from engine.cli.corpus import register", "CLI modules may not import each other"),
    ("engine/agents/bm25.py", "from engine.train import silver", "agents may not import engine.train"),
    ("engine/agents/runner.py", "from engine.studio import annotator", "agents may not import engine.studio"),
    ("engine/agents/launch.py", "from engine.distributed import launch", "agents may not import engine.distributed"),
])
def test_each_new_kind_of_bad_import_fails_the_check(tmp_path, path, line, why):
    found = _added(_copy(tmp_path), path, line)
    rules = [(v.path, v.why.split(":")[0]) for v in found if not v.why.startswith("import circle")]
    assert rules == [(path, why)], "\n".join(map(str, found))  # (an import back up may also close a circle)


def test_an_import_circle_fails_the_check_with_the_path_that_closes_it(tmp_path):
    # sample imports formats; formats importing sample closes a circle
    found = _added(_copy(tmp_path), "engine/datasets/formats.py", "from engine.datasets.sample import write_suite")
    assert len(found) == 1 and found[0].why.startswith("import circle: "), "\n".join(map(str, found))
    assert "engine.datasets.formats" in found[0].why and "engine.datasets.sample" in found[0].why


def test_a_three_module_circle_is_one_violation(tmp_path):
    (tmp_path / "tools").mkdir()
    for name, imports in (("a", "b"), ("b", "c"), ("c", "a")):
        (tmp_path / "tools" / f"{name}.py").write_text(f"import tools.{imports}\n")
    found = check_layers.check(tmp_path)
    assert [v.why.split(";")[0] for v in found] == ["import circle: tools.a -> tools.b -> tools.c -> tools.a"]


def test_a_circle_between_scripts_fails_the_check(tmp_path):
    # scripts import their neighbours by bare name (scripts/results.py <-> scripts/results_learning.py was one)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "results.py").write_text("def table():\n    import results_learning\n")
    (tmp_path / "scripts" / "results_learning.py").write_text("import json\nimport results as base\n")
    found = check_layers.check(tmp_path)
    assert [v.why.split(";")[0] for v in found] == [
        "import circle: scripts.results -> scripts.results_learning -> scripts.results"]
    assert found[0].path == "scripts/results_learning.py" and found[0].line == 2


@pytest.mark.parametrize(("line", "touched"), [
    ("with self.engine._lock: pass", "self.engine._lock"),  # the step lock is the engine's
    ("return backend.engine._grammar_cache()", "backend.engine._grammar_cache"),
    ("return session.seq.token_ids", "session.seq"),  # a session's Sequence is the engine's
    ("session.history_len = 0", "session.history_len"),  # so are its fields
])
def test_only_engine_core_touches_the_engines_insides(tmp_path, line, touched):
    root = _copy(tmp_path)
    found = _added(root, "engine/serve/backend.py", line)
    assert [(v.path, v.verb, v.imported) for v in found] == [("engine/serve/backend.py", "touches", touched)]
    assert "only engine.core may" in found[0].why
    assert not _added(root, "engine/core/llm_engine.py", line)  # inside the core it is its own business


def test_public_session_fields_may_be_read_outside_the_core(tmp_path):
    assert not _added(_copy(tmp_path), "engine/serve/backend.py", "return session.num_tokens, session.cache_salt")
