"""Per-item scorers by registration: a metric is one file plus one line in `_REGISTERED` below.

A `Scorer` names a per-item function ("module:function", imported on first use) that turns a gold
question and its prediction into a verdict (bool) or a score (float), says which items it applies
to, and how the items aggregate: "proportion" (the share of items it holds for, with a Wilson
interval) or "mean". `engine/eval/items.py` stores each scorer's value on the item under its name
(so `items.jsonl` holds it and `dossier eval compare --verdict NAME` can pair on it),
`engine/eval/summary.py` writes `NAME_accuracy` and `NAME_accuracy_ci` (overall and per breakdown
group) into the report, and the headline rows of the Markdown, HTML and terminal reports show
`label` beside the built-in metrics. Nothing else needs to change for a new metric:
tests/eval/test_example_scorer.py adds one and checks every report.

    Scorer("docvqa", "DocVQA-2026 binary", "engine.eval.metrics.docvqa:item_verdict")
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Scorer", "registered_scorers", "AGGREGATES"]

AGGREGATES = ("proportion", "mean")


@dataclass(frozen=True, slots=True)
class Scorer:
    name: str  # the item's field in items.jsonl and the report's `NAME_accuracy` / `NAME_accuracy_ci` keys
    label: str  # the headline row's label in every report
    score: str  # "module:function(question, prediction, options) -> bool | float"; options: EvalConfig or None
    aggregate: str = "proportion"  # "proportion": share with a Wilson interval; "mean": the plain mean, no interval
    applies: str | None = None  # "module:function(question) -> bool": the items it scores; None: every item
    judged_label: str | None = None  # the label when the report's `NAME_scoring.final_answer` names an LLM judge

    def __post_init__(self) -> None:
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"scorer {self.name!r}: aggregate {self.aggregate!r} is not one of {AGGREGATES}")
        for path in (self.score, self.applies):
            if path is not None and ":" not in path:
                raise ValueError(f"scorer {self.name!r}: {path!r} must read 'module:function'")

    def score_item(self, question, prediction, options=None) -> bool | float | None:
        """This scorer's value for one gold item (its prediction None when it has none); None where it does not apply."""
        if self.applies is not None and not _load(self.applies)(question):
            return None
        return _load(self.score)(question, prediction, options)

    def title(self, report: dict) -> str:
        """The headline label: `judged_label` when an LLM judge produced this scorer's verdicts."""
        scoring = str((report.get(f"{self.name}_scoring") or {}).get("final_answer", ""))
        return self.judged_label if self.judged_label and scoring.startswith("LLM") else self.label


def _load(path: str) -> Callable:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


_REGISTERED = (
    Scorer("docvqa", "DocVQA-2026 binary", "engine.eval.metrics.docvqa:item_verdict"),
    Scorer("mudabench", "MuDABench tolerance", "engine.eval.metrics.mudabench:item_verdict",
           judged_label="MuDABench judge"),
    Scorer("numeric", "numeric (±1 %)", "engine.eval.metrics.numeric:item_verdict",
           applies="engine.eval.metrics.numeric:numeric_gold"),
)

_SCORERS = {scorer.name: scorer for scorer in _REGISTERED}


def registered_scorers() -> tuple[Scorer, ...]:
    """Every registered per-item scorer, in registration order (the order of the report's rows)."""
    return tuple(_SCORERS.values())
