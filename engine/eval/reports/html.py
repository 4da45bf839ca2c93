"""One self-contained HTML report: inline CSS and inline SVG plots, nothing fetched, no scripts.

Plots (each an `<svg class="plot">` with a fixed id):
  plot-kuiper    cumulative difference D_k against items sorted by effort (MADQA Figure 6);
  plot-budget    accuracy against the search budget N (MADQA Figure 9), with trajectories;
  plot-taxonomy  the error taxonomy as bars;
  plot-retrieval-curve  cumulative gold document / page hits by search iteration (MADQA Figure 22);
  plot-recovery  recovery and accuracy after a failed first query, with Wilson intervals (Figure 23);
  plot-guessability  a closed-book run's accuracy per guessability class (Appendix E.2), only for such a run;
with the Kuiper-per-effort-measure and Spearman tables (Appendix F.4, Tables 11-12), followed by
the breakdown tables.
"""

from __future__ import annotations

from html import escape

from engine.eval.report import Report, as_report
from engine.eval.reports.analyses import effort_rows, guess_rows, recovery_rows, spearman_rows
from engine.eval.reports.markdown import breakdown_rows, headline_rows, stage_rows, taxonomy_rows
from engine.eval.reports.numbers import count, num, pct
from engine.eval.reports.svg import bar_chart, line_chart

__all__ = ["render_html", "PLOT_IDS", "CLOSED_BOOK_PLOT_IDS"]

PLOT_IDS = ("plot-kuiper", "plot-budget", "plot-taxonomy", "plot-retrieval-curve", "plot-recovery")
CLOSED_BOOK_PLOT_IDS = ("plot-guessability",)  # drawn only when the report has guessability

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 980px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; }
th, td { border: 1px solid #ddd; padding: 4px 10px; text-align: left; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; } svg.plot { display: block; margin: 1em 0; max-width: 100%; height: auto; }
"""


def _table(header: list[str], rows: list[list[str]], text_columns: tuple[int, ...] = (0,)) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td{"" if i in text_columns else " class=num"}>{escape(str(c))}</td>'
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _kuiper_plot(report: Report) -> str:
    detail = report.summary.detail
    curve = (detail.kuiper_curve if detail is not None else None) or []
    if not curve:
        reason = report.summary.kuiper_undefined or "no items"
        return (line_chart([("D_k", [(0, 0.0)])], element_id="plot-kuiper", title="Cumulative difference (undefined)",
                           x_label="items sorted by effort", y_label="D_k", zero_line=True)
                + f'<p class="note">Kuiper is undefined: {escape(reason)}.</p>')
    points = [(p["k"], p["d"]) for p in curve]
    chart = line_chart([("D_k", points)], element_id="plot-kuiper",
                       title=f"Cumulative difference, Kuiper = {num(report.summary.kuiper, 2)}",
                       x_label="items sorted by effort (boundaries between effort values)",
                       y_label="D_k = Σ (correct − mean)", zero_line=True)
    efforts = ", ".join(f"{p['effort']}→k={p['k']}" for p in curve[1:][:30])
    return chart + f'<p class="note">Boundaries (effort → items so far): {escape(efforts)}.</p>'


def _budget_plot(report: Report) -> str:
    steps = report.steps
    if not steps or not steps.get("accuracy_at_budget"):
        return (line_chart([("accuracy", [(0, 0.0)])], element_id="plot-budget",
                           title="Accuracy vs search budget (no trajectories given)", x_label="search budget N",
                           y_label="accuracy", y_range=(0.0, 1.0))
                + '<p class="note">Pass --trajectories (or evaluate a run directory) to see this curve.</p>')
    points = [(r["budget"], r["accuracy"]) for r in steps["accuracy_at_budget"]]
    return line_chart([("accuracy", points)], element_id="plot-budget", title="Accuracy vs search budget N",
                      x_label="search budget N (searches allowed before answering)", y_label="accuracy",
                      y_range=(0.0, 1.0), steps=True)


def _taxonomy_plot(report: Report) -> str:
    rows = [(label.split(" (")[0], share, f"{count} ({pct(share)})") for label, count, share, _ in taxonomy_rows(report)]
    return bar_chart(rows, element_id="plot-taxonomy", title="Error taxonomy (share of all items)")


_NO_TRAJECTORIES = '<p class="note">Pass --trajectories (or evaluate a run directory) to see this plot.</p>'


def _effort_tables(report: Report) -> str:
    if not effort_rows(report):
        return ""
    return ("<h3>Kuiper by effort measure</h3>"
            '<p class="note">MADQA Appendix F.4 (Table 12): the same statistic with effort as steps, total tokens, '
            "generated tokens or seconds; items without a measure are left out of it (missing).</p>"
            + _table(["effort measure", "Kuiper", "items", "missing", "dropped (≤ 0)", "undefined because"],
                     effort_rows(report), text_columns=(0, 5))
            + '<p class="note">Spearman rank correlation between the measures (Table 11).</p>'
            + _table(["measures", "Spearman ρ", "items with both"], spearman_rows(report)))


def _retrieval_curve_plot(report: Report) -> str:
    curve = (report.steps or {}).get("cumulative_hits")
    if not curve or not curve["iterations"]:
        return (line_chart([("gold document", [(1, 0.0)])], element_id="plot-retrieval-curve",
                           title="Cumulative gold hits by search (no searches recorded)", x_label="search iteration i",
                           y_label="share of questions", y_range=(0.0, 1.0)) + _NO_TRAJECTORIES)
    rows = curve["iterations"]
    chart = line_chart([("gold document", [(r["i"], r["doc_rate"]) for r in rows]),
                        ("gold page", [(r["i"], r["page_rate"]) for r in rows])],
                       element_id="plot-retrieval-curve", title="Cumulative gold hits by search iteration",
                       x_label="search iteration i (searches 1..i)", y_label="share of questions", y_range=(0.0, 1.0),
                       dashed=("gold page",))  # never above the document curve: dashed, so both show where equal
    return chart + (f'<p class="note">Over the {curve["n"]} questions with gold evidence and a trajectory; after '
                    f'search 1: document {pct(rows[0]["doc_rate"])}, page {pct(rows[0]["page_rate"])}; after search '
                    f'{rows[-1]["i"]}: document {pct(rows[-1]["doc_rate"])}, page {pct(rows[-1]["page_rate"])}.</p>')


def _recovery_plot(report: Report) -> str:
    recovery = (report.steps or {}).get("recovery")
    if not recovery:
        return bar_chart([("recovered", 0.0, "no trajectories")], element_id="plot-recovery",
                         title="Recovery after a failed first query") + _NO_TRAJECTORIES
    keys = (("recovered", "recovered"), ("accuracy_recovered", "accuracy, recovered"),
            ("accuracy_not_recovered", "accuracy, not recovered"),
            ("accuracy_needing_recovery", "accuracy, all of them"))
    shares = [recovery[key] for key, _ in keys]
    chart = bar_chart([(label, share["rate"] or 0.0, f"{pct(share['rate'])} ({share['k']}/{share['n']})")
                       for (_, label), share in zip(keys, shares)], element_id="plot-recovery",
                      title=f"After a failed first query ({recovery['needing_recovery']} questions)",
                      intervals=[tuple(share["ci"]) if share["ci"] else None for share in shares])
    return (chart + f'<p class="note">{recovery["needing_recovery"]} of {recovery["n"]} questions needed recovery '
            f'(the first search returned no gold document); {recovery["never_searched"]} never searched. Whiskers: '
            "95% Wilson intervals.</p>"
            + _table(["", "share", "k / n", "95% CI"], recovery_rows(report), text_columns=(0, 2, 3)))


def _guessability_section(report: Report) -> list[str]:
    guess = report.sections.get("guessability")
    if not guess:
        return []
    classes = guess["classes"]
    chart = bar_chart([(name.replace("_", " "), c["accuracy"] or 0.0, f"{pct(c['accuracy'])} ({c['correct']}/{c['n']})")
                       for name, c in classes.items()], element_id="plot-guessability",
                      title="Closed-book accuracy per guessability class",
                      intervals=[tuple(c["ci"]) if c["ci"] else None for c in classes.values()])
    return ["<h2>Guessability (closed-book)</h2>",
            f'<p>{pct(guess["accuracy"])} of {guess["n"]} answered right without documents; chance on yes/no and '
            f'binary questions accounts for {pct(guess["chance_share"])} of all items, memorised facts for '
            f'{pct(guess["memorised_share"])} (MADQA Appendix E.2, Table 9).</p>', chart,
            _table(["class", "questions", "correct", "accuracy", "95% CI", "chance"], guess_rows(report),
                   text_columns=(0, 4))]


def render_html(report: Report | dict, title: str = "Dossier evaluation") -> str:
    """The whole report as one HTML document that opens offline."""
    report = as_report(report)
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{escape(title)}</h1>",
             f'<p class="note">{report.summary.n} gold items, {report.n_predictions} predictions; '
             f'{report.missing_predictions} gold items had no prediction and count as wrong; '
             f'{report.unmatched_predictions} predictions matched no gold item; '
             f'{report.skipped_lines} input lines were skipped.</p>',
             "<h2>Headline</h2>", _table(["metric", "value", "95% interval / note"],
                                         [list(r) for r in headline_rows(report)], text_columns=(0, 2)),
             "<h2>Effort calibration</h2>", _kuiper_plot(report), _effort_tables(report),
             "<h2>Accuracy at a step budget</h2>", _budget_plot(report)]
    steps = report.steps
    if steps:
        first = steps["first_query"]
        parts.append(f'<p>First search hit a gold page in {pct(first["page_hit_rate"])} and a gold document in '
                     f'{pct(first["doc_hit_rate"])} of {first["n"]} episodes.</p>')
        drift = steps.get("query_drift")
        if drift:
            parts.append(f'<p>Query drift (1 − cosine between consecutive queries): mean {num(drift["mean"])}, '
                         f'median {num(drift["median"])} over {drift["n"]} episodes.</p>')
    parts += ["<h2>Search trajectories</h2>", _retrieval_curve_plot(report), _recovery_plot(report)]
    parts += _guessability_section(report)
    parts += ["<h2>Error taxonomy</h2>", _taxonomy_plot(report),
              _table(["class", "items", "share of items", "share of errors"],
                     [[label, str(count), pct(share), pct(err)] for label, count, share, err in taxonomy_rows(report)])]
    for key, name in (("hop_type", "hop type"), ("category", "document category"), ("domain", "domain")):
        parts += [f"<h2>By {name}</h2>", _table(["group", "n", "accuracy", "95% CI", "Page F1", "Doc F1", "Kuiper"],
                                                breakdown_rows(report.breakdowns[key]))]
    if report.sections.get("qguide"):
        from engine.eval.reports.qguide import qguide_html

        parts.append(qguide_html(report.sections["qguide"]))
    coverage = report.mudabench_coverage
    if coverage:
        parts += ["<h2>MuDABench intermediate-fact coverage</h2>", _table(
            ["level", "accuracy", "correct / total"],
            [[level, pct(coverage[f"{level}_accuracy"]), f"{count(coverage[f'{level}_correct'])} / {coverage[f'{level}_total']}"]
             for level in ("row", "cell", "column")])]
    if report.sections.get("workflow_stages"):
        parts += ["<h2>Workflow stage taxonomy</h2>",
                  "<p>First stage that went wrong, per wrongly answered question (MuDABench tolerance).</p>",
                  _table(["stage", "questions", "share of errors"], stage_rows(report))]
    if report.skipped_line_reasons:
        parts += ["<h2>Skipped input lines</h2><ul>"] + [f"<li>{escape(r)}</li>" for r in report.skipped_line_reasons]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
