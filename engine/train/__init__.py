"""Learning from trajectories: query pairs, silver trajectories, LoRA fine-tuning and a learned stop rule."""

from engine.train.pairs import PairFilter, QueryPair, build_pairs, search_target, split_pairs
from engine.train.records import TrajectoryRecord, keep_most_trusted, load_runs
from engine.train.split import DocumentSplit, split_by_document

__all__ = [
    "DocumentSplit",
    "PairFilter",
    "QueryPair",
    "TrajectoryRecord",
    "build_pairs",
    "keep_most_trusted",
    "load_runs",
    "search_target",
    "split_by_document",
    "split_pairs",
]
