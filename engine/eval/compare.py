"""Comparing systems item by item: paired exact McNemar test and Cohen's kappa.

Both work on the items two systems share (matched by gold id) and on each item's `correct`
flag (the judge's verdict when the evaluation used a judge, else ANLS* >= 0.5). A system is
given as an evaluation directory (items.jsonl from `dossier eval --out`), a run directory
(scored here, without a judge), or a predictions file plus the gold file.
"""

from __future__ import annotations

from pathlib import Path

from engine.eval.items import ItemResult
from engine.eval.scorers import registered_scorers
from engine.eval.reports.files import load_item_results
from engine.eval.stats import cohen_kappa, mcnemar_exact, wilson_interval

__all__ = ["load_system", "load_system_items", "compare_items", "compare_many", "matrix_lines", "system_name",
           "VERDICTS", "verdicts"]


def system_name(source: str | Path) -> str:
    """A short name for a system: the directory name (its parent for an `eval` output folder)."""
    path = Path(source).resolve()
    if path.is_file():
        return path.parent.name if path.name == "items.jsonl" else path.stem
    return f"{path.parent.name}/{path.name}" if path.name == "eval" else path.name


def load_system_items(source: str | Path, gold: str | Path | None = None) -> list[ItemResult]:
    """Item results of one system (see the module docstring for what `source` may be)."""
    return load_system(source, gold)[0]


def load_system(source: str | Path, gold: str | Path | None = None) -> tuple[list[ItemResult], dict | None]:
    """Item results of one system and its evaluation report (None for an eval dir without report.json).

    A run directory is scored here with its trajectories, so the report has first-query hits
    and searches per question (engine/eval/analyses/human.py compares them).
    """
    import json

    from engine.eval.evaluate import EvalConfig, evaluate
    from engine.eval.inputs import load_inputs

    path = Path(source)
    folder = path.parent if path.is_file() and path.name == "items.jsonl" else path
    if (path.is_file() and path.name == "items.jsonl") or (path.is_dir() and (path / "items.jsonl").is_file()):
        report_path = folder / "report.json"
        report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.is_file() else None
        return load_item_results(path), report
    inputs = load_inputs(path, gold)
    result = evaluate(inputs.questions, inputs.predictions, inputs.episodes, EvalConfig(bootstrap=0), inputs.errors)
    return result.items, result.report


def verdicts() -> tuple[str, ...]:
    """Which per-item verdict may count as right: "correct", or any registered scorer (engine/eval/scorers.py)."""
    return ("correct", *(scorer.name for scorer in registered_scorers() if scorer.aggregate == "proportion"))


VERDICTS = verdicts()  # the verdicts registered when this module was imported (use verdicts() for the current ones)


def compare_items(a: list[ItemResult], b: list[ItemResult], level: float = 0.95, verdict: str = "correct") -> dict:
    """Paired comparison of two systems on their shared items.

    Args:
        verdict: "correct" (the judge's, else ANLS* >= 0.5), "mudabench" (MuDABench's numeric tolerance)
            or "docvqa" (DocVQA-2026's binary rule).

    Returns:
        accuracies with Wilson intervals, the 2x2 table (both right, only A, only B, both
        wrong), the exact McNemar p-value, Cohen's kappa, and how many items were not shared.
    """
    by_id_b = {item.id: item for item in b}
    paired = [(item, by_id_b[item.id]) for item in a if item.id in by_id_b]
    n = len(paired)
    assert verdict in verdicts(), f"unknown verdict {verdict!r}"
    right_a = [bool(getattr(x, verdict)) for x, _ in paired]
    right_b = [bool(getattr(y, verdict)) for _, y in paired]
    only_a = sum(1 for x, y in zip(right_a, right_b) if x and not y)
    only_b = sum(1 for x, y in zip(right_a, right_b) if y and not x)
    both = sum(1 for x, y in zip(right_a, right_b) if x and y)
    k_a, k_b = sum(right_a), sum(right_b)
    return {
        "n_paired": n,
        "only_in_a": len(a) - n,
        "only_in_b": len(b) - n,
        "accuracy_a": k_a / n if n else None,
        "accuracy_a_ci": list(wilson_interval(k_a, n, level)),
        "accuracy_b": k_b / n if n else None,
        "accuracy_b_ci": list(wilson_interval(k_b, n, level)),
        "difference": (k_a - k_b) / n if n else None,
        "both_correct": both,
        "only_a_correct": only_a,
        "only_b_correct": only_b,
        "both_wrong": n - both - only_a - only_b,
        "mcnemar_p": mcnemar_exact(only_a, only_b),
        "cohen_kappa": cohen_kappa(right_a, right_b),
    }


def compare_many(systems: list[tuple[str, list[ItemResult]]], level: float = 0.95, verdict: str = "correct") -> dict:
    """Every pair of three or more systems: the system x system Cohen's kappa and McNemar p matrices.

    MADQA compares systems by kappa (how alike their right and wrong items are) beside accuracy;
    each cell is `compare_items` on the pair's shared items, so a pair may share fewer items than
    either system has.

    Args:
        systems: (name, item results) per system, in the order the matrices list them.

    Returns:
        {"systems": names, "accuracy": [{"system", "accuracy", "ci", "n"}], "kappa": matrix,
         "mcnemar_p": matrix, "n_paired": matrix, "pairs": [{"a", "b", **compare_items}]};
        a matrix is a list of rows, the diagonal kappa 1 and p 1 (a system against itself).
    """
    assert verdict in verdicts(), f"unknown verdict {verdict!r}"
    names = [name for name, _ in systems]
    size = len(systems)
    kappa = [[1.0 if i == j else None for j in range(size)] for i in range(size)]
    p_value = [[1.0 if i == j else None for j in range(size)] for i in range(size)]
    paired = [[len(items) if i == j else 0 for j in range(size)] for i, (_, items) in enumerate(systems)]
    pairs = []
    for i in range(size):
        for j in range(i + 1, size):
            result = compare_items(systems[i][1], systems[j][1], level, verdict)
            kappa[i][j] = kappa[j][i] = result["cohen_kappa"]
            p_value[i][j] = p_value[j][i] = result["mcnemar_p"]
            paired[i][j] = paired[j][i] = result["n_paired"]
            pairs.append({"a": names[i], "b": names[j], **result})
    accuracy = []
    for name, items in systems:
        k = sum(1 for item in items if getattr(item, verdict))
        accuracy.append({"system": name, "accuracy": k / len(items) if items else None,
                         "ci": list(wilson_interval(k, len(items), level)), "n": len(items)})
    return {"systems": names, "verdict": verdict, "accuracy": accuracy, "kappa": kappa, "mcnemar_p": p_value,
            "n_paired": paired, "pairs": pairs}


def _cell(value: float | None, p_value: bool) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if p_value else f"{value:.3f}"


def matrix_lines(result: dict) -> list[str]:
    """`compare_many`'s result as terminal lines: accuracies, then the kappa and McNemar p matrices."""
    from engine.eval.reports.numbers import ci_text, pct

    names = result["systems"]
    lines = ["accuracy: " + " · ".join(f"{row['system']} {pct(row['accuracy'])} {ci_text(row['ci'])} (n={row['n']})"
                                       for row in result["accuracy"])]
    width = max(len(name) for name in names + ["McNemar exact p"])
    column = max(8, *(len(name) + 2 for name in names))
    for key, title in (("kappa", "Cohen's kappa"), ("mcnemar_p", "McNemar exact p"), ("n_paired", "paired items")):
        lines.append(f"{title:<{width}}  " + "".join(f"{name:>{column}}" for name in names))
        for name, row in zip(names, result[key]):
            cells = [str(v) if key == "n_paired" else _cell(v, key == "mcnemar_p") for v in row]
            lines.append(f"{name:<{width}}  " + "".join(f"{c:>{column}}" for c in cells))
    return lines
