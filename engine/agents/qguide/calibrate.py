"""τ from a reliability floor: `--gate auto --rho-min R --calibration RUN_DIR` (Q-Guide Section 3.1, Appendix E).

The paper grounds its gate in measured reliability rather than a hand-set level:
    ρ(ℓ) = Pr[correct | σ = ℓ],   τ = min{ℓ : ρ(ℓ) ≥ ρ_min},   low ≺ med ≺ high.
ρ is measured on a calibration run: a Q-Guide run (any gate) on questions whose documents are
split off from the ones this run answers, so the floor is not fitted on the test documents.
Its committed submissions (scored before the gate; an "Unknown" submission commits to nothing)
at each level give ρ(ℓ), correct meaning ANLS* ≥ 0.5 against the gold, as `dossier eval`
scores. A level with no committed submission has no ρ and is never chosen; when no level
reaches ρ_min the run is refused (lower --rho-min, or use a fixed --gate).

Make a calibration run by splitting the questions by document, e.g. half the documents of a
suite to calibration.jsonl and the rest to test.jsonl, then
    dossier run --agent qguide --questions calibration.jsonl --out runs/calib ...
    dossier run --agent qguide --questions test.jsonl --gate auto --rho-min 0.6 --calibration runs/calib ...
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.agents.qguide.protocol import LEVELS
from engine.datasets.formats import load_questions
from tools.errors import DossierError

__all__ = ["reliability_table", "choose_tau", "resolve_calibration", "resolve_gate", "format_table",
           "question_documents", "overlapping", "check_questions"]


def _committed(answer) -> bool:
    parts = answer if isinstance(answer, list) else [answer]
    return bool(parts) and any(str(p).strip().lower() not in ("", "unknown") for p in parts)


def reliability_table(records: list[tuple[str | None, object, bool]]) -> list[dict]:
    """ρ(ℓ) per level from (confidence, submitted answer, correct) of each calibration question.

    Returns:
        One row per level, low to high: {"level", "submissions", "committed", "correct", "rho"}
        (rho None where nothing was committed at that level).
    """
    rows = []
    for level in LEVELS:
        at = [(answer, correct) for confidence, answer, correct in records if confidence == level]
        committed = [correct for answer, correct in at if _committed(answer)]
        rows.append({"level": level, "submissions": len(at), "committed": len(committed), "correct": sum(committed),
                     "rho": sum(committed) / len(committed) if committed else None})
    return rows


def choose_tau(rows: list[dict], rho_min: float) -> str | None:
    """τ = min{ℓ : ρ(ℓ) ≥ ρ_min} over the levels in order; None when no level reaches it."""
    for row in rows:  # low, med, high
        if row["rho"] is not None and row["rho"] >= rho_min:
            return row["level"]
    return None


def question_documents(questions) -> set[str]:
    """The documents a set of questions is about: the named `document`, else the gold evidence documents."""
    documents = set()
    for q in questions:
        named = q.extra.get("document")
        documents.update([str(named)] if named is not None else [e.document for e in q.evidence])
    return documents


def _run_records(run_dir: Path) -> tuple[list[tuple[str | None, object, bool]], set[str]]:
    from engine.eval.metrics.anls import ACCURACY_THRESHOLD, ANLSScorer

    named = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("questions")
    if not named:
        raise DossierError(f"{run_dir / 'run.json'} names no questions file, so its answers cannot be scored")
    questions_path = Path(named)
    if not questions_path.is_absolute():  # as `dossier eval` reads it: relative to the run directory
        questions_path = run_dir / questions_path
    questions, _ = load_questions(questions_path)
    gold = {q.id: q for q in questions}
    scorer = ANLSScorer()
    records = []
    trajectories = run_dir / "trajectories.jsonl"
    if not trajectories.exists():
        raise DossierError(f"calibration run {run_dir} has no trajectories.jsonl; run it to the end first")
    for line in trajectories.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        qguide = record.get("qguide")
        if not isinstance(qguide, dict) or record.get("id") not in gold:
            continue
        submitted = qguide.get("submitted")
        correct = submitted is not None and scorer(submitted, gold[record["id"]].answer_variants) >= ACCURACY_THRESHOLD
        records.append((qguide.get("confidence"), submitted, bool(correct)))
    if not records:
        raise DossierError(f"calibration run {run_dir} holds no Q-Guide trajectory; calibrate with --agent qguide")
    return records, question_documents(questions)


def resolve_calibration(calibration: str | Path | None, rho_min: float | None) -> dict:
    """τ from the calibration run (`--gate auto`, resolved once before a run starts).

    Returns:
        {"tau", "rho_min", "calibration", "questions": calibration questions scored, "table": rows,
        "documents": the calibration run's documents, which this run's questions may not be about}.

    Raises:
        DossierError: no --rho-min or --calibration, no such run, no Q-Guide trajectories, or no
            level reaching rho_min.
    """
    if rho_min is None or calibration is None:
        raise DossierError("--gate auto needs --rho-min R (a reliability in (0, 1]) and --calibration RUN_DIR "
                           "(a Q-Guide run on questions about other documents)")
    run_dir = Path(calibration)
    if not (run_dir / "run.json").exists():
        raise DossierError(f"--calibration {run_dir}: not a run directory (no run.json); make one with "
                           "`dossier run --agent qguide` on questions about other documents")
    records, documents = _run_records(run_dir)
    table = reliability_table(records)
    tau = choose_tau(table, rho_min)
    if tau is None:
        best = max((r["rho"] for r in table if r["rho"] is not None), default=None)
        raise DossierError(f"--rho-min {rho_min}: no confidence level reaches it in {run_dir} (best ρ "
                           f"{'—' if best is None else f'{best:.2f}'}); lower --rho-min or use --gate low|med|high")
    return {"tau": tau, "rho_min": rho_min, "calibration": str(run_dir), "questions": len(records), "table": table,
            "documents": sorted(documents)}


def overlapping(resolved: dict, questions) -> list[tuple[str, list[str]]]:
    """(question id, the calibration run's documents it is about) of each question that shares one."""
    calibrated = set(resolved.get("documents", ()))
    shared = ((q.id, sorted(question_documents([q]) & calibrated)) for q in questions)
    return [(qid, documents) for qid, documents in shared if documents]


def check_questions(resolved: dict, questions) -> None:
    """Refuse questions about a document the calibration run answered questions about (split by document).

    Run at the start of a run, before the model loads (`QGuideSettings.run_start`), so a bad split
    costs seconds, not a model load.

    Raises:
        DossierError: naming the first such question, its documents and how many more there are.
    """
    shared = overlapping(resolved, questions)
    if not shared:
        return
    (qid, documents), rest = shared[0], [i for i, _ in shared[1:]]
    others = ""
    if rest:
        listed = ", ".join(rest[:5]) + (" …" if len(rest) > 5 else "")
        others = f" (and {len(rest)} more of this run's questions: {listed})"
    raise DossierError(f"question {qid} is about {', '.join(documents)}, which the calibration run "
                       f"{resolved['calibration']} answered questions about{others}; split the questions by "
                       "document so ρ is not measured on the documents it gates: leave these questions out of "
                       "--questions, or calibrate on a run over other documents")


def resolve_gate(calibration: str | Path, rho_min: float, questions) -> dict:
    """`resolve_calibration`, refusing `questions` about a document the calibration run saw (`check_questions`)."""
    resolved = resolve_calibration(calibration, rho_min)
    check_questions(resolved, questions)
    return resolved


def format_table(resolved: dict) -> str:
    """The reliability table and the chosen τ, as printed at the start of the run."""
    lines = [f"gate auto: reliability on {resolved['calibration']} ({resolved['questions']} questions, "
             f"committed submissions scored before the gate)"]
    for row in resolved["table"]:
        rho = "—" if row["rho"] is None else f"{row['rho']:.3f}"
        mark = "  ≥ ρ_min" if row["rho"] is not None and row["rho"] >= resolved["rho_min"] else ""
        lines.append(f"  {row['level']:<4}  ρ {rho:>5}  ({row['correct']}/{row['committed']} committed, "
                     f"{row['submissions']} submissions){mark}")
    lines.append(f"τ = min{{ℓ : ρ(ℓ) ≥ {resolved['rho_min']}}} = {resolved['tau']}")
    return "\n".join(lines)

