"""The Markdown report, and the table rows shared with the HTML and terminal reports."""

from __future__ import annotations

from engine.eval.analyses.human import condition_note
from engine.eval.report import Report, Summary, as_report
from engine.eval.reports.analyses import analyses_markdown
from engine.eval.reports.numbers import ci_text, count, judged_accuracy, num, pct
from engine.eval.scorers import Scorer, registered_scorers

__all__ = ["render_markdown", "headline_rows", "taxonomy_rows", "breakdown_rows", "stage_rows"]

TAXONOMY_LABELS = {
    "correct": "correct",
    "correct_verbose": "correct, verbose (right but over-verbose)",
    "retrieval_failure": "retrieval failure (no gold document cited)",
    "navigation_failure": "navigation failure (gold document, no gold page)",
    "comprehension_failure": "comprehension failure (gold page cited, answer wrong)",
    "refusal": "refusal / no answer",
    "unclassified": "unclassified (no gold evidence)",
}


def headline_rows(report: Report | dict) -> list[tuple[str, str, str]]:
    """(metric, value, interval or note) rows for the main table."""
    report = as_report(report)
    summary, detail = report.summary, report.summary.detail
    semantic_note = (ci_text(summary.semantic_accuracy_ci) + f" raw {pct(summary.semantic_raw)}, "
                     f"{summary.judge_calls} judge calls" + _judged_note(report)) if summary.semantic_accuracy \
        is not None else "no --judge given"
    kuiper_note = ci_text(summary.kuiper_ci, as_percent=False)
    if summary.kuiper is None:
        kuiper_note = f"undefined: {summary.kuiper_undefined}"
    if summary.kuiper_p_value is not None:
        kuiper_note += f" bootstrap; permutation p = {summary.kuiper_p_value:.3g}"
    kuiper_note += f"; n={summary.kuiper_n}, dropped {summary.kuiper_dropped} with effort 0"
    if detail is not None and detail.kuiper_madqa is not None:
        kuiper_note += f"; MADQA harness (ties in file order): {detail.kuiper_madqa:.2f}"
    judge = report.judge.provenance if report.judge is not None else {}
    if summary.semantic_accuracy is not None:
        # MADQA's headline: exact match, then the judge, corrected for the judge's measured errors
        corrected = not str(judge.get("correction") or "").startswith("not corrected")
        q1, q0 = (report.judge.q1, report.judge.q0) if report.judge is not None else (None, None)
        head = [("accuracy (judge, Rogan–Gladen corrected)" if corrected else "accuracy (judge, uncorrected)",
                 judged_accuracy(summary.semantic_accuracy, summary.semantic_clipped), semantic_note + (f"; q1 {num(q1)}, q0 {num(q0)} "
                                                                  f"from {judge.get('calibration_source', 'flags')}"
                                                                  if corrected else f"; {judge.get('correction')}")),
                ("accuracy (ANLS* ≥ 0.5)", pct(summary.accuracy), ci_text(summary.accuracy_ci))]
    else:
        head = [("accuracy (ANLS* ≥ 0.5)", pct(summary.accuracy),
                 ci_text(summary.accuracy_ci) + " no --judge: MADQA's headline is an LLM judge's accuracy corrected "
                 "for its errors, which also accepts right answers ANLS* rejects (e.g. with a unit or scale)")]
    condition = condition_note(report.behaviour)  # an oracle-condition human run is reported apart
    return [
        *([("condition", str(report.behaviour["condition"]), condition)] if condition else []),
        *head,
        ("mean ANLS*", num(summary.mean_anls), ""),
        ("exact match", pct(summary.exact_match), ci_text(summary.exact_match_ci)),
        *[(scorer.title({f"{scorer.name}_scoring": report.scoring(scorer.name)}), _scored(summary, scorer),
           ci_text(summary.scorers[scorer.name].interval))
          for scorer in registered_scorers() if scorer.name in summary.scorers],  # engine/eval/scorers.py
        ("Page F1", num(summary.page_f1), f"P {num(summary.page_precision)} R {num(summary.page_recall)}"),
        ("Doc F1", num(summary.doc_f1), f"P {num(summary.doc_precision)} R {num(summary.doc_recall)}"),
        ("Kuiper", num(summary.kuiper, 2), kuiper_note),
        ("wasted effort ratio", num(detail.wasted_effort_ratio if detail else None),
         f"mean steps wrong {num(detail.mean_steps_incorrect if detail else None, 2)} / right "
         f"{num(detail.mean_steps_correct if detail else None, 2)}"),
    ]


def _judged_note(report: Report) -> str:
    """What the correction was applied to: the judged items' raw share, and the floor when it clipped."""
    summary = report.summary
    if summary.semantic_judged_raw is None:
        return ""
    note = f" (judged items {pct(summary.semantic_judged_raw)}; the first stage's {summary.n - summary.judge_calls} " \
           "counted as decided)"
    q0 = report.judge.q0 if report.judge is not None else None
    if summary.semantic_clipped == "floor" and q0 is not None:
        note += f"; {pct(summary.semantic_judged_raw)} is below 1 − q0 = {pct(1 - q0)}, what this judge accepts " \
                "of wrong answers, so the judged items' accuracy cannot be told from 0 by this judge"
    return note


def _scored(summary: Summary, scorer: Scorer) -> str:
    value = summary.scorers[scorer.name].value
    return pct(value) if scorer.aggregate == "proportion" else num(value)


def taxonomy_rows(report: Report | dict) -> list[tuple[str, int, float, float | None]]:
    """(label, count, share of items, share of errors) per taxonomy class with a count or always-shown class."""
    tax = as_report(report).summary.taxonomy
    rows = []
    for name, label in TAXONOMY_LABELS.items():
        count = tax["counts"].get(name, 0)  # reports written before "correct_verbose" existed lack it
        if (name == "unclassified" and not count) or name not in tax["counts"]:
            continue
        rows.append((label, count, tax["shares"].get(name, 0.0), tax["error_shares"].get(name)))
    return rows


def stage_rows(report: Report | dict) -> list[list[str]]:
    """Rows of the workflow stage taxonomy: stage, wrong questions it is blamed for, share of errors."""
    stages = as_report(report).sections.get("workflow_stages")
    if not stages:
        return []
    return [[name, str(count), pct(stages["shares_of_errors"][name])] for name, count in stages["counts"].items()
            if count or name != "unattributed"]


def breakdown_rows(group: dict[str, Summary]) -> list[list[str]]:
    """Rows of one breakdown table: group, n, accuracy, CI, Page F1, Doc F1, Kuiper."""
    return [[name, str(s.n), pct(s.accuracy), ci_text(s.accuracy_ci), num(s.page_f1), num(s.doc_f1), num(s.kuiper, 2)]
            for name, s in group.items()]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines + [""]


def render_markdown(report: Report | dict) -> str:
    """The whole report as Markdown."""
    report = as_report(report)
    lines = ["# Dossier evaluation", "",
             f"{report.summary.n} gold items, {report.n_predictions} predictions: {report.missing_predictions} gold "
             f"items without a prediction (counted wrong), {report.unmatched_predictions} predictions matching no "
             f"gold item, {report.duplicate_predictions} duplicates ignored, {report.skipped_lines} input lines "
             "skipped.", ""]
    lines += ["## Headline", ""] + _table(["metric", "value", "95% interval / note"],
                                          [list(r) for r in headline_rows(report)])
    lines += ["## Error taxonomy", ""] + _table(
        ["class", "items", "share of items", "share of errors"],
        [[label, str(count), pct(share), pct(err)] for label, count, share, err in taxonomy_rows(report)])
    for key, title in (("hop_type", "hop type"), ("category", "document category"), ("domain", "domain")):
        lines += [f"## By {title}", ""] + _table(["group", "n", "accuracy", "95% CI", "Page F1", "Doc F1", "Kuiper"],
                                                 breakdown_rows(report.breakdowns[key]))
    steps = report.steps
    if steps:
        first = steps["first_query"]
        lines += ["## Trajectories", "",
                  f"{steps['matched']} of {steps['episodes']} episodes matched gold items. First search returned a "
                  f"gold page in {pct(first['page_hit_rate'])} and a gold document in {pct(first['doc_hit_rate'])} "
                  f"of {first['n']} episodes.", ""]
        drift = steps.get("query_drift")
        if drift:
            lines += [f"Query drift (mean 1 − cosine between consecutive queries, all-MiniLM-L6-v2): mean "
                      f"{num(drift['mean'])}, median {num(drift['median'])} over {drift['n']} episodes; correct "
                      f"{num(drift['mean_correct'])}, wrong {num(drift['mean_incorrect'])}.", ""]
        lines += _table(["search budget N", "accuracy", "correct"],
                        [[str(r["budget"]), pct(r["accuracy"]), f"{r['correct']} / {r['n']}"]
                         for r in steps["accuracy_at_budget"]])
    lines += analyses_markdown(report)  # Kuiper per effort measure, Figures 22-23, guessability
    if report.sections.get("qguide"):
        from engine.eval.reports.qguide import qguide_markdown

        lines += qguide_markdown(report.sections["qguide"])
    coverage = report.mudabench_coverage
    if coverage:
        scoring = report.mudabench_scoring or {}
        lines += ["## MuDABench intermediate-fact coverage", "",
                  f"Final answer scored by: {scoring.get('final_answer', 'rule-based tolerance')}. "
                  f"Coverage scored by: {scoring.get('coverage', 'rule-based tolerance')}.", ""] + _table(
            ["level", "accuracy", "correct / total"],
            [[level, pct(coverage[f"{level}_accuracy"]), f"{count(coverage[f'{level}_correct'])} / {coverage[f'{level}_total']}"]
             for level in ("row", "cell", "column")])
    if report.sections.get("workflow_stages"):
        stages = report.sections["workflow_stages"]
        lines += ["## Workflow stage taxonomy", "",
                  f"First stage that went wrong, for the {stages['questions'] - stages['correct']} of "
                  f"{stages['questions']} questions answered wrongly under MuDABench's tolerance.", ""]
        lines += _table(["stage", "questions", "share of errors"], stage_rows(report))
    if report.skipped_line_reasons:
        lines += ["## Skipped input lines", ""] + [f"- {reason}" for reason in report.skipped_line_reasons] + [""]
    return "\n".join(lines)
