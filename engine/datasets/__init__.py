"""Benchmark data: canonical formats, importers and the generated sample suite."""

from engine.datasets.formats import (
    Evidence,
    LineError,
    Prediction,
    Question,
    iter_jsonl,
    load_predictions,
    load_questions,
    parse_page,
    write_jsonl,
)

__all__ = [
    "Evidence",
    "LineError",
    "Prediction",
    "Question",
    "iter_jsonl",
    "load_predictions",
    "load_questions",
    "parse_page",
    "write_jsonl",
]
