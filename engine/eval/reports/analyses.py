"""Rows and lines of MADQA's further analyses, shared by the terminal, Markdown and HTML reports.

The analyses are computed in engine/eval/analyses/ (effort.py, retrieval_curve.py,
guessability.py); this module only words them. Every function takes the report (a `Report`, or its
report.json dict) and returns [] when its analysis is absent (an older report, no trajectories, not closed-book).
"""

from __future__ import annotations

from engine.eval.report import Report, as_report
from engine.eval.reports.numbers import ci_text, num, pct

__all__ = ["MEASURE_LABELS", "GUESS_LABELS", "effort_rows", "spearman_rows", "recovery_rows", "guess_rows",
           "analyses_lines", "analyses_markdown"]

MEASURE_LABELS = {"steps": "steps (searches, else iterations)", "total_tokens": "total tokens (prompt + output)",
                  "generated_tokens": "generated tokens", "seconds": "seconds (wall clock)"}
GUESS_LABELS = {"yes_no": "yes/no", "binary_choice": "binary choice (A or B)", "memorisation": "other (memorisation)"}


def effort_rows(report: Report | dict) -> list[list[str]]:
    """MADQA Table 12's form: measure, Kuiper, items kept, missing, dropped (<= 0), why undefined."""
    report = as_report(report)
    effort = report.effort_measures
    if not effort:
        return []
    return [[MEASURE_LABELS.get(name, name), num(m["kuiper"], 2), str(m["n"]), str(m["missing"]), str(m["dropped"]),
             m["undefined"] or ""] for name, m in effort["measures"].items()]


def spearman_rows(report: Report | dict) -> list[list[str]]:
    """MADQA Table 11's form: each pair of measures, Spearman's rho, items with both."""
    report = as_report(report)
    effort = report.effort_measures
    if not effort:
        return []
    return [[f"{pair['a']} ~ {pair['b']}", num(pair["rho"]), str(pair["n"])] for pair in effort["spearman"]]


def recovery_rows(report: Report | dict) -> list[list[str]]:
    """Figure 23 as a table: what, share, k / n, interval."""
    report = as_report(report)
    recovery = (report.steps or {}).get("recovery")
    if not recovery:
        return []
    rows = []
    for key, label in (("recovered", "recovered (a later search found a gold document)"),
                       ("accuracy_recovered", "accuracy when recovered"),
                       ("accuracy_not_recovered", "accuracy when not recovered"),
                       ("accuracy_needing_recovery", "accuracy after a failed first query"),
                       ("accuracy_first_hit", "accuracy when the first query hit")):
        share = recovery[key]
        rows.append([label, pct(share["rate"]), f"{share['k']} / {share['n']}", ci_text(share["ci"])])
    return rows


def guess_rows(report: Report | dict) -> list[list[str]]:
    """Guessability per class: class, questions, correct, accuracy, interval, chance."""
    report = as_report(report)
    guess = report.sections.get("guessability")
    if not guess:
        return []
    return [[GUESS_LABELS[name], str(c["n"]), str(c["correct"]), pct(c["accuracy"]), ci_text(c["ci"]),
             pct(c["chance"])] for name, c in guess["classes"].items()]


def analyses_lines(report: Report | dict) -> list[str]:
    """A few terminal lines: Kuiper per effort measure, Figure 22's curve, Figure 23, guessability."""
    report = as_report(report)
    lines = []
    effort = report.effort_measures
    if effort:
        kuipers = " · ".join(f"{name.replace('_', ' ')} {num(m['kuiper'], 2)}"
                             + (f" ({m['missing']} missing)" if m["missing"] else "")
                             for name, m in effort["measures"].items())
        rhos = " · ".join(f"{p['b'].replace('_', ' ')} {num(p['rho'])}"
                          for p in effort["spearman"] if p["a"] == "steps")
        lines.append(f"Kuiper by effort measure: {kuipers}")
        lines.append(f"Spearman rho of steps with: {rhos}")
    steps = report.steps or {}
    curve = steps.get("cumulative_hits")
    if curve and curve["iterations"]:
        rows = curve["iterations"][:10]
        lines.append(f"gold document found by search i=1..{rows[-1]['i']} (n={curve['n']}): "
                     + " ".join(f"{100 * r['doc_rate']:.0f}%" for r in rows))
        lines.append("gold page found by search i: " + " ".join(f"{100 * r['page_rate']:.0f}%" for r in rows))
    recovery = steps.get("recovery")
    if recovery:
        rec = recovery["recovered"]
        lines.append(f"first search missed every gold document for {recovery['needing_recovery']} of {recovery['n']} "
                     f"({recovery['never_searched']} never searched): recovered {rec['k']} ({pct(rec['rate'])}); "
                     f"accuracy when recovered {pct(recovery['accuracy_recovered']['rate'])}, not recovered "
                     f"{pct(recovery['accuracy_not_recovered']['rate'])}")
    guess = report.sections.get("guessability")
    if guess:
        lines.append(f"closed-book guessability {pct(guess['accuracy'])} of {guess['n']}: " + " · ".join(
            f"{GUESS_LABELS[name]} {c['correct']}/{c['n']}" for name, c in guess["classes"].items())
            + f"; chance share {pct(guess['chance_share'])}, memorised share {pct(guess['memorised_share'])}")
    return lines


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows] + [""]


def analyses_markdown(report: Report | dict) -> list[str]:
    """The analyses as Markdown sections."""
    report = as_report(report)
    lines = []
    if effort_rows(report):
        lines += ["## Kuiper by effort measure (MADQA Appendix F.4)", ""]
        lines += _table(["effort measure", "Kuiper", "items", "missing", "dropped (<= 0)", "undefined because"],
                        effort_rows(report))
        lines += _table(["measures", "Spearman rho", "items with both"], spearman_rows(report))
    curve = (report.steps or {}).get("cumulative_hits")
    if curve and curve["iterations"]:
        lines += ["## Cumulative gold hits by search iteration (MADQA Figure 22)", "",
                  f"Share of the {curve['n']} questions with gold evidence and a trajectory whose searches 1..i "
                  "returned a gold document / page.", ""]
        lines += _table(["search i", "gold document", "gold page"],
                        [[str(r["i"]), pct(r["doc_rate"]), pct(r["page_rate"])] for r in curve["iterations"]])
    if recovery_rows(report):
        recovery = report.steps["recovery"]
        lines += ["## Recovery after a failed first query (MADQA Figure 23)", "",
                  f"{recovery['needing_recovery']} of {recovery['n']} questions needed recovery (their first search "
                  f"returned no gold document); {recovery['never_searched']} never searched.", ""]
        lines += _table(["", "share", "k / n", "95% CI"], recovery_rows(report))
    if guess_rows(report):
        guess = report.sections["guessability"]
        lines += ["## Guessability (closed-book, MADQA Appendix E.2)", "",
                  f"{pct(guess['accuracy'])} guessed without documents; chance on two-way questions accounts for "
                  f"{pct(guess['chance_share'])} of all items, memorised facts for {pct(guess['memorised_share'])}.",
                  ""]
        lines += _table(["class", "questions", "correct", "accuracy", "95% CI", "chance"], guess_rows(report))
    return lines
