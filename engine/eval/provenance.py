"""What a report records about how it was made: the judge and its calibration, the input files, a silver run.

`evaluate()` scores; this adds what only its caller knows (which model judged, where the calibration came
from, how many answers the cache held, which files were read), so `dossier eval` itself only parses options.
"""

from __future__ import annotations

__all__ = ["record_provenance"]


def record_provenance(report: dict, judge_model: str | None, calibration_source: str, correction: str | None,
                      judge_stats, input_paths: dict, run: dict | None) -> None:
    """Add the judge's provenance, the input paths and a silver run's label to `report`, in place.

    Args:
        report: evaluate()'s report.
        judge_model: the --judge model, or None.
        calibration_source: where q0/q1 came from, in words.
        correction: why the judge's accuracy was not corrected ("not corrected: ..."), or None.
        judge_stats: engine.eval.judging.PrejudgeStats of the judging, or None.
        input_paths: the files the evaluation read (EvalInputs.paths).
        run: the run directory's run.json, or None.
    """
    report["judge"].update(model=judge_model, calibration_source=calibration_source, correction=correction or
                           ("Rogan-Gladen with the calibration's q0, q1" if judge_model else None),
                           **({"needed": judge_stats.needed, "from_cache": judge_stats.from_cache,
                               "judged": judge_stats.judged, "unparsed": judge_stats.unparsed,
                               "seconds": judge_stats.seconds} if judge_stats else {}))
    if correction:
        report["semantic_accuracy_ci"] = None  # the identity correction's interval would claim a calibration
    report["inputs"] = input_paths
    if (run or {}).get("source") == "silver":  # mined by `dossier trajectories mine`: labelled wherever shown
        report["source"] = "silver"
