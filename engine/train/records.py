"""Trajectories as training material: each episode with its gold question, source and annotator.

A run directory (CONTRIBUTING.md, "Run directories and trajectories") names its gold question
file in run.json, so `--trajectories RUN_DIR` needs nothing else. The source of an episode is
its own `"source"` field (`human` from the search studio, `silver` from `dossier trajectories
mine`), else the run's (`run.json` "source", or agent "human"), else `agent` (a model's run).
Where one question has episodes from several sources, only the most trusted source is kept:
human before agent before silver (human trajectories take precedence when given).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.datasets.formats import LineError, Question, iter_jsonl, load_questions
from tools.errors import DossierError

__all__ = ["TrajectoryRecord", "load_runs", "keep_most_trusted", "SOURCES"]

SOURCES = ("human", "agent", "silver")  # most trusted first


@dataclass(slots=True)
class TrajectoryRecord:
    """One episode of a run directory, with what training needs to judge it."""

    run: str  # the run directory it came from
    raw: dict  # the trajectory line as written (steps with tool calls, tool results, raw outputs)
    question: Question  # its gold question (evidence pages, answer variants)
    source: str  # "human", "agent" or "silver"
    annotator: str | None = None  # who made a human trajectory (studio user), when recorded
    run_meta: dict = field(default_factory=dict)  # run.json of its run directory

    @property
    def id(self) -> str:
        return self.question.id


def _source_of(raw: dict, meta: dict) -> str:
    source = raw.get("source") or meta.get("source") or ("human" if meta.get("agent") == "human" else "agent")
    return str(source) if str(source) in SOURCES else "agent"


def load_runs(runs: list[Path], questions: Path | None = None) -> tuple[list[TrajectoryRecord], list[str]]:
    """Read the trajectories of several run directories (or trajectory files) with their gold questions.

    Args:
        runs: run directories (trajectories.jsonl + run.json), or trajectories.jsonl files.
        questions: gold questions for every run (default: each run's run.json "questions").

    Returns:
        (records, problems): every usable episode, and one line per skipped episode or line.

    Raises:
        DossierError: a run has no trajectories, or no gold questions can be found for it.
    """
    gold_cache: dict[str, dict[str, Question]] = {}
    records: list[TrajectoryRecord] = []
    problems: list[str] = []
    for run in runs:
        run = Path(run)
        path = run / "trajectories.jsonl" if run.is_dir() else run
        folder = run if run.is_dir() else run.parent
        if not path.is_file():
            raise DossierError(f"{run} has no trajectories.jsonl; give a run directory written by `dossier run`, "
                               "`dossier trajectories mine` or the search studio")
        meta = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
        gold_path = questions or (Path(meta["questions"]) if meta.get("questions") else None)
        if gold_path is None:
            raise DossierError(f"{run} has no run.json naming its gold questions; pass --questions Q.jsonl")
        key = str(Path(gold_path).resolve())
        if key not in gold_cache:
            if not Path(gold_path).is_file():
                raise DossierError(f"gold questions {gold_path} (named by {folder / 'run.json'}) do not exist; "
                                   "pass --questions Q.jsonl")
            items, errors = load_questions(gold_path)
            problems += [f"gold {err}" for err in errors]
            gold_cache[key] = {q.id: q for q in items}
        gold = gold_cache[key]
        errors: list[LineError] = []
        for number, raw in iter_jsonl(path, errors):
            where = f"{path}:{number}"
            if not isinstance(raw, dict) or not isinstance(raw.get("steps"), list):
                problems.append(f"{where}: not a trajectory (needs a 'steps' list)")
                continue
            question = gold.get(str(raw.get("id")))
            if question is None:
                problems.append(f"{where}: question id {raw.get('id')!r} is not in the gold file {gold_path}")
                continue
            annotator = raw.get("annotator") or meta.get("annotator")
            records.append(TrajectoryRecord(str(run), raw, question, _source_of(raw, meta),
                                            None if annotator is None else str(annotator), meta))
        problems += [str(err) for err in errors]
    return records, problems


def keep_most_trusted(records: list[TrajectoryRecord]) -> tuple[list[TrajectoryRecord], int]:
    """Per question, only the episodes of its most trusted source; returns (kept, dropped count)."""
    best: dict[str, int] = {}
    for record in records:
        rank = SOURCES.index(record.source)
        best[record.id] = min(best.get(record.id, rank), rank)
    kept = [r for r in records if SOURCES.index(r.source) == best[r.id]]
    return kept, len(records) - len(kept)
