"""`dossier eval`: score a run (accuracy, attribution, effort, taxonomy, statistics) and its subcommands.

    dossier eval RUN_DIR                       # a run directory: gold path read from run.json
    dossier eval PRED.jsonl --gold Q.jsonl     # or predictions + gold (+ --trajectories T.jsonl)
    dossier eval compare RUN_A RUN_B           # paired McNemar test and Cohen's kappa
    dossier eval compare RUN_A RUN_B RUN_C...  # system x system kappa and McNemar p matrices
    dossier eval splits EVAL_DIR... --out DIR  # CTT test/dev/train splits from several systems
    dossier eval calibrate-judge LABELS.jsonl  # judge sensitivity q1 and specificity q0

`dossier eval PRED` and `dossier eval score PRED` are the same command: the group runs
`score` whenever its first word is not a subcommand name.
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from engine.cli.options import FormatOpt, OutputFormat, emit_json

__all__ = ["register", "eval_app"]

SUBCOMMANDS_NOTE = "Subcommands: compare, splits, calibrate-judge; anything else is scored (`score` is implied)."


class _DefaultScoreGroup(TyperGroup):
    """Runs `score` when the first argument is not a subcommand, so `dossier eval PRED` works."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["score", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(
    cls=_DefaultScoreGroup,
    no_args_is_help=True,
    help="Score predictions against gold: ANLS*, Page/Doc F1, Kuiper, taxonomy, statistics. " + SUBCOMMANDS_NOTE,
)

GoldOpt = Annotated[Path | None, typer.Option("--gold", "-g", help="Gold questions JSONL (canonical format).")]


JudgeDtypeOpt = Annotated[str, typer.Option(
    "--judge-dtype", help="The judge's dtype: auto (bfloat16 on a GPU and on a CPU with avx512_bf16, else float32), "
                          "float32, bfloat16 or float16. A calibration holds for the dtype it ran in: judge with the "
                          "calibration's.")]


JudgeDeterministicOpt = Annotated[bool, typer.Option(
    "--judge-deterministic/--no-judge-deterministic",
    help="Run the judge batch-invariant (CPU): a verdict does not depend on which items shared its batch, so a "
         "re-scored run gets the same verdicts (docs/determinism.md); slower at prefill.")]


@eval_app.command("score")
def score(
    source: Annotated[Path, typer.Argument(help="A run directory (run.json + predictions.jsonl) or a predictions JSONL.")],
    gold: GoldOpt = None,
    trajectories: Annotated[Path | None, typer.Option("--trajectories", "-t", help="Trajectories JSONL.")] = None,
    judge: Annotated[str | None, typer.Option("--judge", help="A local model as MADQA's LLM judge (a packaged name such "
                                              "as qwen2.5-1.5b, a GGUF file or a model folder); its Rogan-Gladen "
                                              "corrected accuracy becomes the headline. Judgements run batched and "
                                              "are cached in OUT/judge_cache.jsonl (a second call reads them). "
                                              "On MuDABench questions the same model also runs MuDABench's own "
                                              "judges (its appendix prompts, paraphrased) for the final answer and "
                                              "the fact coverage, in place of the rule-based tolerance; the report's "
                                              "mudabench_scoring says which scored.")] = None,
    calibration: Annotated[Path | None, typer.Option(help="The judge's calibration: the JSON of `dossier eval "
                                                          "calibrate-judge --judge MODEL --out FILE` (overrides --q0, "
                                                          "--q1, --judge-m0, --judge-m1). Under 20 labelled items: "
                                                          "no correction, the raw judge accuracy is shown.")] = None,
    judge_quantization: Annotated[str | None, typer.Option(help="Quantise the judge's linears at load: int8 or "
                                                                "int4 on a CPU (see `dossier bench quant`).")] = None,
    judge_dtype: JudgeDtypeOpt = "auto",
    judge_deterministic: JudgeDeterministicOpt = True,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write report.json/.md/.html and items.jsonl here "
                                              "(default for a run directory: RUN_DIR/eval).")] = None,
    q0: Annotated[float, typer.Option(help="Judge specificity for the Rogan-Gladen correction.")] = 1.0,
    q1: Annotated[float, typer.Option(help="Judge sensitivity for the Rogan-Gladen correction.")] = 0.98,
    judge_m0: Annotated[int, typer.Option(help="Calibration items a human marked incorrect.")] = 48,
    judge_m1: Annotated[int, typer.Option(help="Calibration items a human marked correct.")] = 152,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for the Kuiper interval (0: none).")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    drift: Annotated[bool, typer.Option(help="Query drift with all-MiniLM-L6-v2 (needs trajectories).")] = True,
    docvqa_strict: Annotated[bool, typer.Option(help="DocVQA-2026: no 'FINAL ANSWER:' means wrong.")] = False,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Score a run or a predictions file; print the headline metrics and write the reports.

    Example:
        $ dossier eval runs/bm25
        200 gold items, 198 predictions (2 gold items without prediction, counted wrong; ...)
        accuracy (ANLS* ≥ 0.5)              70.5%  [63.8, 76.4]
        Page F1                             0.647  P 0.685 R 0.627
        Kuiper                               8.42  [5.89, 15.25] bootstrap; permutation p = 0.0649; ...
        reports: runs/bm25/eval/report.html (.md, .json, items.jsonl)
    """
    from engine.eval.calibration import JudgeCalibration
    from engine.eval.evaluate import EvalConfig, evaluate
    from engine.eval.inputs import load_inputs
    from engine.eval.provenance import record_provenance
    from engine.eval.reports.files import json_safe, write_reports
    from engine.eval.reports.terminal import terminal_lines

    inputs = load_inputs(source, gold, trajectories)
    if out is None and source.is_dir():
        out = source / "eval"
    calibration_source, correction = "the flags (--q0/--q1/--judge-m0/--judge-m1; defaults: MADQA's judge)", None
    if calibration is not None:
        from engine.eval.judging import MIN_CALIBRATION_ITEMS, load_calibration

        stored = load_calibration(calibration)
        q0, q1, judge_m0, judge_m1 = stored["q0"], stored["q1"], stored["m0"], stored["m1"]
        calibration_source = f"{calibration} ({stored['n']} labelled items, judge {stored.get('judge', '?')})"
        if stored["n"] < MIN_CALIBRATION_ITEMS or q0 is None or q1 is None:
            correction = (f"not corrected: the calibration has {stored['n']} labelled items (at least "
                          f"{MIN_CALIBRATION_ITEMS}, of both kinds, are needed)")
            q0, q1 = 1.0, 1.0  # the identity correction: the raw judge accuracy
    config = EvalConfig(calibration=JudgeCalibration(q1=q1, q0=q0, m1=judge_m1, m0=judge_m0),
                        bootstrap=bootstrap, seed=seed, docvqa_require_marker=docvqa_strict,
                        agent=(inputs.run or {}).get("agent"))  # its spec declares its own analyses
    judge_stats = None
    if judge:
        from engine.eval.judging import BatchedJudge, JudgeCache, items_to_judge, prejudge

        batched = BatchedJudge(judge, _judge_engine(judge_quantization, judge_deterministic, judge_dtype))
        asked = items_to_judge(inputs.questions, inputs.predictions)
        cache = JudgeCache(out / "judge_cache.jsonl" if out else None)
        if fmt is OutputFormat.human:  # a bar on a terminal, a plain line every few seconds in a log
            from engine.cli.options import StepProgress

            total, judged = len(set(asked)), 0

            def advance(count: int) -> None:  # prejudge reports how many more answers it has judged
                nonlocal judged
                judged += count
                progress("judging", judged, total)

            with StepProgress(f"judging with {judge}", unit="item") as progress:
                config.judge, judge_stats = prejudge(asked, batched, cache, advance)
        else:
            config.judge, judge_stats = prejudge(asked, batched, cache, None)
        if any(q.extra.get("metadata") or q.extra.get("source_rows") for q in inputs.questions):
            from engine.eval.llm_judge import load_engine_answer_judge, load_engine_row_judge

            shared = batched.load()  # one engine (with --judge-quantization) serves all three judges
            config.coverage_judge = load_engine_row_judge(judge, engine=shared)
            config.mudabench_judge = load_engine_answer_judge(judge, engine=shared)  # MuDABench's final-answer judge
    if drift and inputs.episodes:
        from engine.eval.embeddings import MiniLMEmbedder

        config.embedder = MiniLMEmbedder()
    result = evaluate(inputs.questions, inputs.predictions, inputs.episodes, config, inputs.errors)
    record_provenance(result.report, judge, calibration_source, correction, judge_stats, inputs.paths, inputs.run)
    files = write_reports(out, result.report, result.items, f"Dossier evaluation: {source}") if out else None
    report = json_safe(result.report)
    if fmt is OutputFormat.json:
        emit_json({**report, "files": files})
        return
    for line in terminal_lines(report):
        typer.echo(line)
    if files:
        typer.echo(f"reports: {files['html']} (.md, .json, items.jsonl)")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


@eval_app.command("compare")
def compare(
    systems: Annotated[list[Path], typer.Argument(help="Two or more systems, each an eval dir (items.jsonl), a run "
                                                       "dir, or a predictions file (with --gold).")],
    gold: GoldOpt = None,
    verdict: Annotated[str, typer.Option(help="What counts as right: correct (judge, else ANLS* >= 0.5), "
                                              "mudabench (MuDABench's numeric tolerance) or docvqa.")] = "correct",
    search_budget: Annotated[int | None, typer.Option(help="Searches counted for 'gold page within the budget' "
                                                           "(default: all an episode made).")] = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Paired comparison of two systems (exact McNemar test, Cohen's kappa), or matrices of them for three or more.

    Run directories are scored with their trajectories, and their behaviour is printed side by
    side first (MADQA's human-vs-agent comparison: a person's studio run against an agent's, or
    two annotators). When both are run directories with trajectories, their searching is compared
    too: the first-query page hit rate and the share of items with a gold page among the searches
    within the budget, each with Wilson intervals and McNemar on the paired items.

    Example:
        $ dossier eval compare runs/human/ana runs/bm25
                                          A ana      B bm25
        accuracy (ANLS* >= 0.5)           75.0%      15.0%
        Page F1                           0.700      0.050
        searches per question             1.40       3.70
        first search hit a gold page      55.0%      5.0%
        ...
        A ana: 75.0% [53.1, 88.8]   B bm25: 15.0% [5.2, 36.0]   paired items 20
        both correct 3 · only A 12 · only B 0 · both wrong 5
        McNemar exact p = 0.000488 · Cohen's kappa = 0.167

    With three or more systems each pair is compared on its shared items and the result is a
    system x system Cohen's kappa matrix and a McNemar p matrix (--format json: "kappa",
    "mcnemar_p", "n_paired" and every pair's full comparison under "pairs"):
        $ dossier eval compare runs/int8 runs/none runs/guided     # the sample suite, 20 items
        accuracy: int8 25.0% [11.2, 46.9] (n=20) · none 30.0% [14.5, 51.9] (n=20) · guided 10.0% ...
        Cohen's kappa        int8    none  guided
        int8                1.000   0.375   0.167
        ...
        McNemar exact p      int8    none  guided
        int8                    1       1   0.375
        ...
    """
    from engine.eval.compare import (compare_items, compare_many, load_system, matrix_lines, system_name,
                                     verdicts)
    from engine.eval.analyses.human import profile, profile_table
    from engine.eval.reports.numbers import ci_text
    from tools.errors import DossierError

    if verdict not in verdicts():
        raise DossierError(f"--verdict {verdict!r} is not one of {', '.join(verdicts())}")
    if len(systems) < 2:
        raise DossierError(f"compare needs at least two systems, got {len(systems)} ({systems[0]}); give another "
                           "eval dir, run dir or predictions file")
    if len(systems) > 2:
        many = compare_many([(system_name(path), load_system(path, gold)[0]) for path in systems], verdict=verdict)
        if fmt is OutputFormat.json:
            emit_json(many)
            return
        for line in matrix_lines(many):
            typer.echo(line.rstrip())
        return
    run_a, run_b = systems
    (items_a, report_a), (items_b, report_b) = load_system(run_a, gold), load_system(run_b, gold)
    result = compare_items(items_a, items_b, verdict=verdict)
    result = {"a": system_name(run_a), "b": system_name(run_b), "verdict": verdict, **result,
              "profile_a": profile(report_a) if report_a else None, "profile_b": profile(report_b) if report_b else None}
    searches = _compare_searches(run_a, run_b, gold, search_budget)
    if searches is not None:
        result["searches"] = searches
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    if report_a and report_b:
        for line in profile_table(result["a"], result["profile_a"], result["b"], result["profile_b"]):
            typer.echo(line.rstrip())
    typer.echo(f"A {result['a']}: {_pct(result['accuracy_a'])} {ci_text(result['accuracy_a_ci'])}   "
               f"B {result['b']}: {_pct(result['accuracy_b'])} {ci_text(result['accuracy_b_ci'])}   "
               f"paired items {result['n_paired']}"
               + (f" (only in A {result['only_in_a']}, only in B {result['only_in_b']})"
                  if result["only_in_a"] or result["only_in_b"] else ""))
    typer.echo(f"both correct {result['both_correct']} · only A {result['only_a_correct']} · "
               f"only B {result['only_b_correct']} · both wrong {result['both_wrong']}")
    kappa = "undefined" if result["cohen_kappa"] is None else f"{result['cohen_kappa']:.3f}"
    typer.echo(f"McNemar exact p = {result['mcnemar_p']:.3g} · Cohen's kappa = {kappa}")
    if searches is not None:
        budget = "all searches" if search_budget is None else f"first {search_budget} searches"
        for key, label in (("first_hit", "first-query page hit"), ("hit_within_budget", f"gold page within {budget}")):
            row = searches[key]
            typer.echo(f"{label}: A {_pct(row['a']['rate'])} {ci_text(row['a']['ci'])} · B {_pct(row['b']['rate'])} "
                       f"{ci_text(row['b']['ci'])} · only A {row['only_a']} · only B {row['only_b']} · "
                       f"McNemar p = {row['mcnemar_p']:.3g} (n={searches['n_paired']})")
        recall = searches["recall_within_budget"]
        if recall["a"] is not None:
            typer.echo(f"gold-page recall within {budget}: A {recall['a']:.3f} · B {recall['b']:.3f}")


def _compare_searches(run_a: Path, run_b: Path, gold: Path | None, budget: int | None) -> dict | None:
    """First-query and within-budget search comparison when both sides are run directories with trajectories."""
    from engine.eval.search_compare import compare_searches, load_run_searches

    a, b = load_run_searches(run_a, gold), load_run_searches(run_b, gold)
    if a is None or b is None:
        return None
    return compare_searches(a[0], a[1], b[1], budget)


@eval_app.command("splits")
def splits(
    systems: Annotated[list[Path], typer.Argument(help="One result per system: eval dirs, run dirs or predictions.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for splits.json and item_statistics.jsonl.")],
    gold: GoldOpt = None,
    test_size: Annotated[int | None, typer.Option(help="Test items (default: 2/9 of all, MADQA's 500 of 2,250).")] = None,
    dev_size: Annotated[int | None, typer.Option(help="Dev items (default: 4/45 of all, MADQA's 200).")] = None,
    sentinel_share: Annotated[float, typer.Option(help="Share of each split kept for items with p <= 0.1.")] = 0.2,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Classical-Test-Theory splits (MADQA): difficulty, discrimination, sentinel pool, 9 difficulty bins.

    Example:
        $ dossier eval splits runs/*/eval --out splits --test-size 50 --dev-size 30
        3 systems x 200 items -> test 50 (10 sentinel), dev 30, train 120
        Spearman rho (system ranking on test vs all items) = 1.000
        wrote splits/splits.json, splits/item_statistics.jsonl
    """
    import json

    import numpy as np

    from engine.datasets.formats import write_jsonl
    from engine.eval.compare import load_system_items, system_name
    from engine.eval.splits import SplitConfig, make_splits
    from tools.errors import DossierError

    if len(systems) < 2:
        raise DossierError(f"CTT splits need results from at least 2 systems, got {len(systems)}")
    results = [load_system_items(path, gold) for path in systems]
    ids = list(dict.fromkeys(item.id for items in results for item in items))
    column = {item_id: j for j, item_id in enumerate(ids)}
    outcomes = np.zeros((len(results), len(ids)), dtype=np.int64)  # (systems, items); absent = wrong
    absent = 0
    for i, items in enumerate(results):
        absent += len(ids) - len(items)
        for item in items:
            outcomes[i, column[item.id]] = int(bool(item.correct))
    config = SplitConfig(test_size=round(len(ids) * 500 / 2250) if test_size is None else test_size,
                         dev_size=round(len(ids) * 200 / 2250) if dev_size is None else dev_size,
                         sentinel_share=sentinel_share)
    names = [system_name(path) for path in systems]
    result = make_splits(ids, outcomes, names, config)
    result["absent_outcomes"] = absent
    out.mkdir(parents=True, exist_ok=True)
    (out / "splits.json").write_text(json.dumps({k: v for k, v in result.items() if k != "items"}, indent=2) + "\n",
                                     encoding="utf-8")
    write_jsonl(out / "item_statistics.jsonl", result["items"])
    if fmt is OutputFormat.json:
        emit_json({**{k: v for k, v in result.items() if k != "items"}, "out": str(out)})
        return
    summary = result["summary"]
    typer.echo(f"{len(names)} systems x {len(ids)} items -> test {summary['test']['n']} "
               f"({len(result['sentinel'])} sentinel), dev {summary['dev']['n']}, train {summary['train']['n']}"
               + (f"; {absent} missing outcomes counted wrong" if absent else ""))
    rho = "undefined" if result["spearman_rho"] is None else f"{result['spearman_rho']:.3f}"
    typer.echo(f"Spearman rho (system ranking on test vs all items) = {rho}")
    typer.echo(f"wrote {out / 'splits.json'}, {out / 'item_statistics.jsonl'}")


@eval_app.command("calibrate-judge")
def calibrate_judge(
    labels: Annotated[Path | None, typer.Argument(
        help='JSONL, one labelled item a line: {"human": "correct", "judge": "partial"}, or with --judge '
             '{"question": ..., "gold": [["..."]], "answer": [...], "human": "correct"} (the judge labels it). '
             "Default: the labelled set Dossier ships for the sample suite (41 items; needs --judge).")] = None,
    judge: Annotated[str | None, typer.Option("--judge", help="Run this judge model on items that carry no 'judge' "
                                              "label (batched, cached next to --out).")] = None,
    judge_quantization: Annotated[str | None, typer.Option(help="Quantise the judge at load: int8 or int4 on a "
                                                                "CPU.")] = None,
    judge_dtype: JudgeDtypeOpt = "auto",
    judge_deterministic: JudgeDeterministicOpt = True,
    known_verdicts: Annotated[Path | None, typer.Option(
        "--known-verdicts", help="Calibrate on items of this suite (a questions JSONL, as `dossier run` reads) "
        "whose verdict is known by construction, instead of human labels: each question's gold answer restated "
        "(right), its amounts changed by 30 %+, another question's answer, and a refusal (wrong). Use questions "
        "of the suite you judge but not the ones you judge (see --skip/--limit). Needs --judge.")] = None,
    answers: Annotated[list[Path] | None, typer.Option(
        "--answers", help="--known-verdicts: also a run's predictions.jsonl (repeatable); its answers to the chosen "
        "questions whose gold is a number join the items, right or wrong by the numeric scorer (within 1 %). Real "
        "wrong answers are harder for a judge than constructed ones.")] = None,
    skip: Annotated[int, typer.Option(min=0, help="--known-verdicts: leave out the file's first N questions "
                                                  "(e.g. the ones the judged runs answered).")] = 0,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N questions. With "
                                              "--known-verdicts and --skip, the first N after the skipped ones.")] = None,
    seed: Annotated[int, typer.Option(help="--known-verdicts: seed of the perturbations and of the other answers "
                                           "chosen.")] = 0,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the calibration JSON here, for "
                                              "`dossier eval RUN --judge MODEL --calibration FILE`.")] = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Judge sensitivity q1 and specificity q0 from human labels or known verdicts (partial counts as correct).

    Example:
        $ dossier eval calibrate-judge --judge qwen2.5-1.5b --out judge-calibration.json
        judged 41 labelled items with qwen2.5-1.5b (41 judged, 0 from the cache)
        q1 (sensitivity) = ... over 20 human-correct items
        q0 (specificity) = ... over 21 human-incorrect items
        use: dossier eval RUN --judge qwen2.5-1.5b --calibration judge-calibration.json

        $ dossier eval calibrate-judge --judge qwen2.5-1.5b --known-verdicts questions.jsonl --skip 50 \\
            --out judge-calibration-financebench.json     # the suite's own questions 51-, no human labels
    """
    from engine.eval.calibration import calibrate_judge as calibrate, labelled_items, load_judge_labels
    from engine.eval.reports.numbers import ci_text
    from tools.errors import DossierError

    built = None
    if known_verdicts is not None:
        if labels is not None:
            raise DossierError("give either LABELS or --known-verdicts QUESTIONS, not both")
        if not judge:
            raise DossierError("--known-verdicts builds items without judge verdicts: give --judge MODEL")
        items, errors, source, built = _known_verdict_items(known_verdicts, skip, limit, seed, answers or [])
    elif labels is None:
        from engine.datasets.judge_labels import SAMPLE_JUDGE_LABELS

        if not judge:
            raise DossierError("the shipped sample-suite labels carry no judge verdicts: give --judge MODEL "
                               "(e.g. qwen2.5-1.5b), or a LABELS file with 'human' and 'judge' on each line")
        items, errors, source = list(SAMPLE_JUDGE_LABELS), [], "the sample suite's labelled set (41 items)"
    else:
        items, errors = labelled_items(labels)
        source = str(labels)
    stats = None
    if judge:
        from engine.eval.judging import BatchedJudge, JudgeCache, JudgeItem, prejudge

        todo = [JudgeItem.of(i["question"], i["gold"], i["answer"]) for i in items if "judge" not in i]
        cache = JudgeCache(out.with_name(out.stem + ".judge_cache.jsonl") if out else None)
        batched = BatchedJudge(judge, _judge_engine(judge_quantization, judge_deterministic, judge_dtype))
        if fmt is OutputFormat.human:  # a long job (seconds an item on a CPU): show it alive, as `eval --judge` does
            from engine.cli.options import StepProgress

            total, done = len(set(todo)), 0

            def advance(count: int) -> None:
                nonlocal done
                done += count
                progress("judging", done, total)

            with StepProgress(f"calibrating {judge}", unit="item") as progress:
                verdict_of, stats = prejudge(todo, batched, cache, advance)
        else:
            verdict_of, stats = prejudge(todo, batched, cache)
        for item in items:
            if "judge" not in item:
                item["judge"] = verdict_of(item["question"], item["gold"], item["answer"]).value
    elif any("judge" not in i for i in items):
        raise DossierError(f"{source}: {sum('judge' not in i for i in items)} items carry no 'judge' label; give "
                           "--judge MODEL to have a judge label them")
    pairs, more_errors = load_judge_labels(items)
    errors += more_errors
    result = {**calibrate(pairs), "judge": judge, "labels": source, "skipped_lines": [str(e) for e in errors]}
    if judge:
        result["judge_engine"] = _judge_engine(judge_quantization, judge_deterministic, judge_dtype)
    if built is not None:
        result["known_verdicts"] = {**built, "kinds": _accepted_by_kind(items)}
    if stats is not None:
        result.update(judged=stats.judged, from_cache=stats.from_cache, judge_seconds=stats.seconds,
                      unparsed=stats.unparsed)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    for err in errors:
        typer.echo(f"skipped {err}", err=True)
    if stats is not None:
        typer.echo(f"judged {stats.needed} labelled items with {judge} ({stats.judged} judged in {stats.seconds} s, "
                   f"{stats.from_cache} from the cache)")
    if built is not None:
        typer.echo(f"{source}: {len(items)} items the judge is asked about; "
                   f"{sum(built['dropped'].values())} more were decided by MADQA's first stage and left out")
        for kind, row in result["known_verdicts"]["kinds"].items():
            typer.echo(f"  {kind:<9} ({row['truth']}): judge accepted {row['accepted']} of {row['items']}")
    for key, name, group in (("q1", "sensitivity", "human-correct"), ("q0", "specificity", "human-incorrect")):
        value = "undefined" if result[key] is None else f"{result[key]:.3f}"
        typer.echo(f"{key} ({name}) = {value} {ci_text(result[key + '_ci'], as_percent=False, digits=3)} "
                   f"over {result['m1' if key == 'q1' else 'm0']} {group} items")
    if result["q0"] is not None and result["q1"] is not None:
        if out is not None:
            typer.echo(f"use: dossier eval RUN --judge {judge or 'MODEL'} --calibration {out}")
        else:
            typer.echo(f"use: dossier eval RUN --judge {judge or 'MODEL'} --q1 {result['q1']:.3g} --q0 "
                       f"{result['q0']:.3g} --judge-m1 {result['m1']} --judge-m0 {result['m0']}")


def _known_verdict_items(path: Path, skip: int, limit: int | None, seed: int, answers: list[Path]):
    """(items, errors, source words, record) of `--known-verdicts`: the file's questions skip+1.. made into items,
    and the `--answers` runs' answers to them."""
    from engine.datasets.formats import load_predictions, load_questions
    from engine.eval.known_verdicts import answer_items, known_verdict_items
    from tools.errors import DossierError

    questions, errors = load_questions(path)
    chosen = questions[skip:skip + limit if limit else None]
    if not chosen:
        raise DossierError(f"--known-verdicts {path}: no questions after --skip {skip} (the file has "
                           f"{len(questions)}); lower --skip")
    items, dropped = known_verdict_items(chosen, seed)
    if not items:
        raise DossierError(f"--known-verdicts {path}: none of its {len(chosen)} questions has a gold answer to "
                           "build items from; give a questions file with answer_variants")
    for run in answers:
        predictions, bad = load_predictions(run)
        errors += bad
        more, decided = answer_items(chosen, predictions)
        items += more
        dropped["answer"] = dropped.get("answer", 0) + decided
    span = f"questions {skip + 1}-{skip + len(chosen)}"
    source = f"known verdicts from {path.name} ({span}, seed {seed})" + (
        f" and the answers of {', '.join(str(a) for a in answers)}" if answers else "")
    return items, errors, source, {"questions": str(path), "span": span, "seed": seed, "dropped": dropped,
                                   "answers": [str(a) for a in answers]}


def _accepted_by_kind(items: list[dict]) -> dict[str, dict]:
    """Per kind of known-verdict item: how many there were and how many the judge accepted (partial counts)."""
    from engine.eval.judge import Verdict
    from engine.eval.known_verdicts import KINDS

    rows = {}
    for kind in KINDS:
        for human in ("correct", "incorrect"):
            mine = [i for i in items if i["kind"] == kind and i["human"] == human]
            if mine:
                name = kind if kind != "answer" else f"answer, {'right' if human == 'correct' else 'wrong'}"
                rows[name] = {"items": len(mine), "truth": "right" if human == "correct" else "wrong",
                              "accepted": sum(Verdict.coerce(i["judge"]).score >= 0.5 for i in mine)}
    return rows


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")


def _judge_engine(quantization: str | None, deterministic: bool, dtype: str = "auto") -> dict:
    """The judge engine's EngineConfig fields from the command line."""
    return ({"deterministic": deterministic} | ({"quantization": quantization} if quantization else {})
            | ({"dtype": dtype} if dtype != "auto" else {}))
