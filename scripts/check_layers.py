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

Within those layers three more rules:
    - the CLI's command modules do not import each other: what several commands share lives in
      engine.cli.options (engine.cli.main, which lists the modules, imports them all);
    - engine.agents imports neither engine.train, engine.studio nor engine.distributed (those
      build on agents, never the other way);
    - no import circles anywhere in the project: modules that import each other, directly or
      around a longer loop (each circle is printed once, as the path of imports that closes it).
      scripts/ and tests/ count too (a script imports its neighbours by their bare names);
    - only engine.core touches the engine's and a session's insides: outside it no code reads
      or writes an underscored name of an `engine` or a `session` (`engine._lock`), a session's
      `.seq` (its Sequence), or assigns to a session's attributes (`session.history_len = ...`).
      What a backend needs from them is a public method of Engine or Session.

Every import statement is read from the source (ast), including imports inside functions,
`importlib.import_module("...")` calls with a literal name, and relative imports. The layer
rules skip tests and scripts; the circle rule reads them too.

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
CLI_SHARED = ("engine.cli.options",)  # what every CLI module may import from the CLI
CLI_ENTRY = ("engine.cli.main", "engine.cli")  # the entry point that lists every command module
AGENTS_MAY_NOT_IMPORT = ("engine.train", "engine.studio", "engine.distributed")


@dataclass(frozen=True)
class Violation:
    path: str  # file, relative to the root
    line: int  # line of the import statement
    importer: str  # dotted module that imports
    imported: str  # dotted module it imports
    why: str  # the rule it breaks
    verb: str = "imports"  # or "touches": `imported` is then an expression reaching into the engine

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} {self.verb} {self.imported}: {self.why}"


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


def imports_of(tree: ast.AST, module: str, is_package: bool, ours: tuple[str, ...] = PACKAGES) -> list[tuple[int, str]]:
    """(line, dotted name) of every import of ours (top-level names `ours`) in a module's syntax tree."""
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
    return [(line, name) for line, name in found if name.partition(".")[0] in ours]


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
    cli_shared = (*CLI_SHARED, "engine.cli")
    if group_from == group_to == "engine.cli" and importer not in CLI_ENTRY and imported not in cli_shared:
        return "CLI modules may not import each other: move what they share to engine/cli/options.py"
    if group_from == "engine.agents" and any(_within(imported, m) for m in AGENTS_MAY_NOT_IMPORT):
        return f"agents may not import {group_to}: it builds on agents; move what agents need into engine/agents/"
    return None


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


ENGINE_NAMES = ("engine", "session")  # expressions (`engine`, `self.engine`, `turn.session`) holding one


def _holder(node: ast.AST) -> str | None:
    """"engine" or "session" when `node` is a name or attribute so called (`self.engine`), else None."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name if name in ENGINE_NAMES else None


def engine_insides(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, the expression, why) of each place a module outside engine.core touches the engine's insides."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        holder = _holder(node.value)
        if holder is None:
            continue
        shown = f"{ast.unparse(node.value)}.{node.attr}"
        if node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append((node.lineno, shown, f"a private name of the {holder}"))
        elif holder == "session" and node.attr == "seq":
            found.append((node.lineno, shown, "the session's Sequence"))
        elif holder == "session" and isinstance(node.ctx, ast.Store):
            found.append((node.lineno, shown, "an assignment to a session's field"))
    return found


def check(root: Path) -> list[Violation]:
    violations: list[Violation] = []
    graph: dict[str, dict[str, int]] = {}  # module -> {module it imports: line}
    paths: dict[str, str] = {}
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            module = module_name(root, path)
            paths[module] = str(path.relative_to(root))
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            edges = graph.setdefault(module, {})
            for line, imported in imports_of(tree, module, path.name == "__init__.py"):
                edges.setdefault(imported, line)
                why = rule_broken(module, imported)
                if why:
                    violations.append(Violation(paths[module], line, module, imported, why))
            if not _within(module, "engine.core") and module != "engine":
                for line, shown, what in engine_insides(tree):
                    violations.append(Violation(paths[module], line, module, shown, f"{what}: only engine.core "
                                                "may; use (or add) a public Engine or Session method", "touches"))
    _scripts_and_tests(root, graph, paths)
    return violations + circles(graph, paths)


def _scripts_and_tests(root: Path, graph: dict[str, dict[str, int]], paths: dict[str, str]) -> None:
    """Add the imports of scripts/ and tests/ to `graph`, for the circle rule. A script's bare `import results`
    is its neighbour scripts/results.py (scripts run with their folder first on sys.path)."""
    scripts = {p.stem for p in (root / "scripts").glob("*.py")} if (root / "scripts").is_dir() else set()
    for top in ("scripts", "tests"):
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else []:
            module = module_name(root, path)
            paths[module] = str(path.relative_to(root))
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            edges = graph.setdefault(module, {})
            found = imports_of(tree, module, path.name == "__init__.py", (*PACKAGES, "scripts", "tests"))
            if top == "scripts" and path.parent == root / "scripts":
                found += [(line, f"scripts.{name}") for line, name in imports_of(tree, module, False, tuple(scripts))
                          if name in scripts]
            for line, imported in found:
                edges.setdefault(imported, line)


def circles(graph: dict[str, dict[str, int]], paths: dict[str, str]) -> list[Violation]:
    """One violation per import circle (a strongly connected set of modules), at one import closing it.

    `from a.b import c` counts as importing a.b.c when that is a module, else a.b; a module's
    import of its own package (its __init__) is not an edge, since Python runs that first anyway.
    """
    edges: dict[str, list[str]] = {}
    for module, imported in graph.items():
        targets = []
        for name in imported:
            if name not in graph:
                name = name.rpartition(".")[0] if name.rpartition(".")[0] in graph else None
            if name and name != module and not module.startswith(name + "."):
                targets.append(name)
        edges[module] = sorted(set(targets))
    found = []
    for component in _components(edges):
        members = set(component)
        start = min(component)
        cycle = _cycle_from(start, edges, members)
        arrows = " -> ".join([*cycle, cycle[0]])
        last, first = cycle[-1], cycle[0]
        line = next(line for name, line in graph[last].items()
                    if name == first or name.rpartition(".")[0] == first)
        found.append(Violation(paths[last], line, last, first, f"import circle: {arrows}; move what they share into "
                               "a module both import, or let one of them stop importing the other"))
    return found


def _components(edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, []))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return sorted(result)


def _cycle_from(start: str, edges: dict[str, list[str]], members: set[str]) -> list[str]:
    """A shortest path of imports from `start` back to itself, inside one component."""
    previous = {start: None}
    queue = [start]
    for node in queue:
        for child in edges[node]:
            if child == start:
                path = [node]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return path[::-1]
            if child in members and child not in previous:
                previous[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in a component but on no cycle")


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    violations = check(root)
    for violation in violations:
        print(violation)
    print(f"{len(violations)} violation(s) of the layer rules" if violations else "imports go one way, no circles, "
          "engine insides stay in engine.core: ok")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
