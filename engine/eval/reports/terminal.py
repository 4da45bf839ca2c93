"""The terminal report of `dossier eval`: the lines it prints, read from the report alone.

The third renderer beside Markdown (markdown.py) and HTML (html.py), over the same report and the
same headline rows, so a metric or section registered once shows in all three. `engine/cli/eval.py`
prints these lines and nothing of its own.
"""

from __future__ import annotations

from engine.eval.analyses.human import behaviour_text
from engine.eval.report import Report, as_report
from engine.eval.reports.analyses import analyses_lines
from engine.eval.reports.markdown import headline_rows
from engine.eval.reports.numbers import count, pct
from engine.eval.reports.qguide import qguide_lines

__all__ = ["terminal_lines", "row_lines"]


def row_lines(rows: list[tuple[str, str, str]]) -> list[str]:
    """(name, value, note) rows as aligned lines: the name padded to the longest, the value right-aligned."""
    width = max(len(r[0]) for r in rows)
    return [f"{name:<{width}}  {value:>7}  {note}".rstrip() for name, value, note in rows]


def _judge_line(report: Report) -> list[str]:
    judge = report.judge.provenance if report.judge is not None else {}  # what record_provenance added
    if "needed" not in judge:  # no --judge, or no judging was needed
        return []
    correction = str(judge.get("correction") or "")
    return [f"judge {judge.get('model')}: {judge['needed']} answers needed a judgement; {judge['from_cache']} read "
            f"from the cache, {judge['judged']} judged in {judge['seconds']} s"
            + (f" ({judge['unparsed']} replies without a verdict, counted incorrect)" if judge["unparsed"] else "")
            + f"; calibration from {judge.get('calibration_source')}"
            + (f"; {correction}" if correction.startswith("not corrected") else "")]


def terminal_lines(report: Report | dict) -> list[str]:
    """Every line `dossier eval` prints for a report, before the line naming the report files."""
    report = as_report(report)
    lines = []
    if report.source == "silver":
        lines.append("silver trajectories (mined queries with the gold answer, not a model's or a person's): "
                     "these scores describe the mining, not an agent")
    lines.append(f"{report.summary.n} gold items, {report.n_predictions} predictions "
                 f"({report.missing_predictions} gold items without prediction, counted wrong; "
                 f"{report.unmatched_predictions} predictions unmatched; {report.skipped_lines} lines skipped)")
    lines += _judge_line(report)
    lines += row_lines(headline_rows(report))
    counts = report.summary.taxonomy["counts"]
    lines.append("taxonomy: " + " · ".join(f"{name.replace('_', ' ')} {count}"
                                           for name, count in counts.items() if count))
    hops = report.breakdowns["hop_type"]
    lines.append("by hop type: " + " · ".join(f"{name} {100 * s.accuracy:.1f}% (n={s.n})"
                                              for name, s in hops.items()))
    steps = report.steps
    if report.sections.get("qguide"):
        lines += qguide_lines(report.sections["qguide"])
    elif steps:
        budget = " ".join(f"N={r['budget']}:{100 * r['accuracy']:.0f}%" for r in steps["accuracy_at_budget"][:11])
        first = steps["first_query"]
        lines.append(f"accuracy at search budget: {budget}")
        lines.append(f"first search hit: page {pct(first['page_hit_rate'])}, document {pct(first['doc_hit_rate'])}"
                     + (f"; query drift {steps['query_drift']['mean']:.3f}" if steps.get("query_drift")
                        and steps["query_drift"]["mean"] is not None else ""))
    lines += analyses_lines(report)  # Kuiper per effort measure, MADQA Figures 22-23, guessability
    coverage = report.mudabench_coverage
    if coverage:
        lines.append("MuDABench fact coverage: " + " · ".join(
            f"{level} {pct(coverage[f'{level}_accuracy'])} ({count(coverage[f'{level}_correct'])}/{coverage[f'{level}_total']})"
            for level in ("cell", "row", "column")))
        scoring = report.mudabench_scoring or {}
        lines.append(f"MuDABench scored by: final answer {scoring.get('final_answer')}; coverage "
                     f"{scoring.get('coverage')}")
    stages = report.sections.get("workflow_stages")
    if stages:
        lines.append(f"workflow stage taxonomy ({stages['questions'] - stages['correct']} wrong of "
                     f"{stages['questions']}): " + " · ".join(f"{name} {count}" for name, count in stages["counts"].items()
                                                              if count or name != "unattributed"))
    behaviour = behaviour_text(report.behaviour)
    if behaviour:
        lines.append(behaviour)
    return lines
