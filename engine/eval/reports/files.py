"""Writing an evaluation to a directory: report.json, report.md, report.html and items.jsonl.

items.jsonl holds one `ItemResult` per gold item; `dossier eval compare` and
`dossier eval splits` read it back with `load_item_results` instead of re-scoring.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from engine.datasets.formats import iter_jsonl, write_jsonl
from engine.eval.items import ItemResult
from engine.eval.report import Report
from engine.eval.reports.html import render_html
from engine.eval.reports.markdown import render_markdown
from tools.errors import DossierError

__all__ = ["write_reports", "load_item_results", "json_safe"]


def json_safe(obj):
    """Replace NaN and infinities (not valid JSON) by None, recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_reports(out_dir: str | Path, report: dict, items: list[ItemResult], title: str = "Dossier evaluation") -> dict:
    """Write the four files (each atomically) and return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = json_safe(report)
    paths = {"json": out / "report.json", "markdown": out / "report.md", "html": out / "report.html",
             "items": out / "items.jsonl"}
    _write_text(paths["json"], json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    typed = Report.from_dict(report)  # what the renderers read
    _write_text(paths["markdown"], render_markdown(typed))
    _write_text(paths["html"], render_html(typed, title))
    write_jsonl(paths["items"], (json_safe(item.to_json()) for item in items))
    return {name: str(path) for name, path in paths.items()}


def load_item_results(path: str | Path) -> list[ItemResult]:
    """Read items.jsonl (or the directory holding it) written by `write_reports`.

    Raises:
        DossierError: the file is missing or a line lacks "id" or "correct".
    """
    path = Path(path)
    if path.is_dir():
        path = path / "items.jsonl"
    errors = []
    items = []
    for number, obj in iter_jsonl(path, errors):
        if not isinstance(obj, dict) or "id" not in obj or "correct" not in obj:
            raise DossierError(f"{path}:{number}: not an item result (needs 'id' and 'correct'); "
                               "was it written by `dossier eval --out`?")
        items.append(ItemResult.from_json(obj))
    if errors:
        raise DossierError(f"{errors[0]} (items.jsonl must be written by `dossier eval --out`)")
    return items
