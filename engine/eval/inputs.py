"""Finding and reading what `dossier eval` scores: a run directory, or a predictions file plus gold.

A run directory (CONTRIBUTING.md) holds run.json, predictions.jsonl and usually
trajectories.jsonl; run.json's "questions" names the gold file, so no --gold is needed.
A relative "questions" path is read relative to the run directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.datasets.formats import LineError, Prediction, Question, load_predictions, load_questions
from engine.eval.trajectories import Episode, load_trajectories
from tools.errors import DossierError

__all__ = ["EvalInputs", "load_inputs", "read_run_json"]


@dataclass(slots=True)
class EvalInputs:
    """Everything read from disk for one evaluation."""

    questions: list[Question]
    predictions: list[Prediction]
    episodes: list[Episode] | None  # None when no trajectories were given or found
    errors: list[LineError] = field(default_factory=list)  # skipped lines of any input file
    paths: dict = field(default_factory=dict)  # which files were read
    run: dict | None = None  # run.json, when the source is a run directory


def read_run_json(run_dir: Path) -> dict:
    """Parse RUN_DIR/run.json, with errors that name the file."""
    path = run_dir / "run.json"
    if not path.is_file():
        runs = sorted(p.parent.name for p in run_dir.glob("*/run.json"))
        if runs:  # a studio directory: one run per annotator
            raise DossierError(f"{run_dir} holds {len(runs)} runs ({', '.join(runs[:5])}); score one with "
                               f"`dossier eval {run_dir / runs[0]}`, or compare two with `dossier eval compare`")
        raise DossierError(f"{run_dir} is a directory without run.json; give a run directory written by "
                           "`dossier run --out`, or a predictions file with --gold")
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DossierError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(run, dict):
        raise DossierError(f"{path}: expected a JSON object")
    return run


def load_inputs(source: str | Path, gold: str | Path | None = None, trajectories: str | Path | None = None) -> EvalInputs:
    """Read gold questions, predictions and (optionally) trajectories.

    Args:
        source: a run directory, or a predictions JSONL file.
        gold: the gold questions file; optional for a run directory (run.json names it).
        trajectories: a trajectories JSONL file; a run directory's own is used when omitted.

    Raises:
        DossierError: a file is missing, or no gold file is known.
    """
    source = Path(source)
    run = None
    if source.is_dir():
        run = read_run_json(source)
        predictions_path = source / "predictions.jsonl"
        if not predictions_path.is_file():
            raise DossierError(f"{source} has no predictions.jsonl (has the run finished any episode?)")
        if gold is None:
            named = run.get("questions")
            if not named:
                raise DossierError(f"{source / 'run.json'} has no 'questions' path; pass --gold QUESTIONS.jsonl")
            gold = Path(named) if Path(named).is_absolute() else source / named
        if trajectories is None and (source / "trajectories.jsonl").is_file():
            trajectories = source / "trajectories.jsonl"
    else:
        if not source.exists():
            raise DossierError(f"{source}: no such file or run directory")
        predictions_path = source
        if gold is None:
            raise DossierError(f"{source} is a predictions file: pass --gold QUESTIONS.jsonl "
                               "(or give a run directory, whose run.json names its questions)")
    questions, errors = load_questions(gold)
    if not questions:
        raise DossierError(f"{gold}: no gold questions could be read ({len(errors)} bad lines)")
    predictions, prediction_errors = load_predictions(predictions_path)
    errors += prediction_errors
    episodes = None
    if trajectories is not None:
        episodes, trajectory_errors = load_trajectories(trajectories)
        errors += trajectory_errors
    paths = {"gold": str(gold), "predictions": str(predictions_path),
             "trajectories": None if trajectories is None else str(trajectories)}
    return EvalInputs(questions, predictions, episodes, errors, paths, run)
