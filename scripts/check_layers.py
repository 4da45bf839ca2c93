#!/usr/bin/env python3
"""Check that imports go one way between Dossier's layers; print each violation, exit 1 if any.

Layers, lowest first (a module may import its own layer and any lower one):

    0  kernels/
    1  tools/, models/          (side by side: neither imports the other, except tools.errors,
                                 the one home of user-facing errors, and tools.progress, the
                                 progress lines for logs: leaf modules anything may import)
    2  engine.core              (and the `engine` package itself, which re-exports it)
    3  engine.datasets
    4  engine.agents, engine.eval and every other engine.* application package
       (serve, studio, train, ...): they may import each other, never the CLI
    5  engine.cli
    -  benchmarks/              may import anything; only engine.cli may import it

Every import statement is read from the source (ast), including imports inside functions,
`importlib.import_module("...")` calls with a literal name, and relative imports. Tests and
scripts are not checked.

Usage:
    python scripts/check_layers.py [ROOT]
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("kernels", "tools", "models", "engine", "benchmarks")
ANYONE_MAY_IMPORT = ("tools.errors", "tools.progress")


@dataclass(frozen=True)
class Violation:
    path: str  # file, relative to the root
    line: int  # line of the import statement
    importer: str  # dotted module that imports
    imported: str  # dotted module it imports
    why: str  # the rule it breaks

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported}: {self.why}"


def layer_of(module: str) -> tuple[int, str]:
    """(rank, group) of a dotted module name of ours; rank -1 for benchmarks (checked separately)."""
    top, _, rest = module.partition(".")
    if top == "kernels":
        return 0, "kernels"
    if top in ("tools", "models"):
        return 1, top
    if top == "benchmarks":
        return -1, "benchmarks"
    sub = rest.partition(".")[0]
    if sub in ("", "core"):
        return 2, "engine.core"
    if sub == "datasets":
        return 3, "engine.datasets"
    if sub == "cli":
        return 5, "engine.cli"
    return 4, f"engine.{sub}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every import of ours in a module's syntax tree."""
    found: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            # `from engine.agents import page_images` imports engine.agents.page_images when that is a module
            found.append((node.lineno, name))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name.partition(".")[0] in PACKAGES]


def rule_broken(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported`, or None when it may."""
    if imported == importer or any(imported == m or imported.startswith(m + ".") for m in ANYONE_MAY_IMPORT):
        return None
    (rank_from, group_from), (rank_to, group_to) = layer_of(importer), layer_of(imported)
    if group_from == "benchmarks":
        return None
    if group_to == "benchmarks":
        return None if group_from == "engine.cli" else "only the CLI may import benchmarks"
    if rank_to > rank_from:
        return f"{group_from} (layer {rank_from}) may not import {group_to} (layer {rank_to}, higher)"
    if rank_to == rank_from == 1 and group_from != group_to:
        return f"{group_from} and {group_to} sit side by side and may not import each other (tools.errors excepted)"
    return None


def check(root: Path) -> list[Violation]:
    violations: list[Violation] = []
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            module = module_name(root, path)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, imported in imports_of(tree, module, path.name == "__init__.py"):
                why = rule_broken(module, imported)
                if why:
                    violations.append(Violation(str(path.relative_to(root)), line, module, imported, why))
    return violations


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    violations = check(root)
    for violation in violations:
        print(violation)
    print(f"{len(violations)} import(s) against the layer order" if violations else "imports go one way: ok")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
