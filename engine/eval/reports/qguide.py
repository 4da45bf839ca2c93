"""Q-Guide's analyses as terminal lines and a Markdown section (data: `engine/eval/analyses/qguide.py`)."""

from __future__ import annotations

from engine.eval.reports.numbers import ci_text, num, pct

__all__ = ["qguide_lines", "qguide_markdown", "qguide_html"]


def _fit_text(fit: dict) -> str:
    if fit.get("falling"):
        return "no saturating fit: accuracy falls as the budget grows (A − B·e^(−kt) needs B > 0)"
    if fit.get("k") is None:
        return "fit undefined (flat curve or fewer than 3 budgets)"
    t_star = "—" if fit.get("t_star") is None else f"{fit['t_star']:.2f}"
    return (f"fit acc(t) = {fit['A']:.3f} − {fit['B']:.3f}·e^(−{fit['k']:.3f}·t), R² {num(fit['r2'])}, t★ {t_star}")


def qguide_lines(q: dict) -> list[str]:
    """The Q-Guide block of `dossier eval`'s terminal output."""
    d = q["decisions"]
    lines = [f"Q-Guide: {q['episodes']} episodes ({', '.join(f'{m} {c}' for m, c in q['modes'].items() if c)}), "
             f"gate τ={q['gate']}, T_max={q['max_rounds']} "
             + (f"turns as Eq. 3 counts them, T_max - 1 rounds of tools (at the limit: {q['at_limit']}; page text "
                f"{q.get('page_text')})" if q.get("t_max_counts") == "turns" else
                f"rounds (an older run: T_max counted tool rounds; at the limit: {q['at_limit']})"
                if q.get("at_limit") else "turns (an older run: its forced last turn counted in T_max)")
             + f", mean turns {q['mean_turns']:.2f}",
             f"gate: passed {d['passed']} · verified {d['verified']} · rewritten to Unknown {d['rewritten']} · "
             f"submit_unknown at T_max {d.get('submit_unknown', 0)} · "
             f"no submission {d['no_submission']} · failed {d['failed']}; routed to verification "
             f"{pct(q['routed_to_verification'])}, of which rewritten {pct(q['rewritten_of_routed'])}; "
             f"abstained (Unknown) {q['abstained']}"]
    lines.append("reliability ρ(σ) over committed submissions (scored before the gate):")
    for r in q["reliability"]:
        lines.append(f"  {r['level']:<5} {r['correct']:>3}/{r['committed']:<3} ρ {pct(r['rho']):>6} "
                     f"{ci_text(r['rho_ci']):<14} ρ/ρ(high) {num(r['relative'], 2):>5}   "
                     f"({r['submissions']} submissions, {r['abstained']} said Unknown)")
    lines.append("coverage vs accuracy by τ (no verification): " + " · ".join(
        f"τ={c['gate']}: coverage {pct(c['coverage'])}, selective {pct(c['selective_accuracy'])}, "
        f"overall {pct(c['accuracy'])}" for c in q["coverage"]))
    budget = q.get("budget")
    if budget:
        points = " ".join(f"T={p['max_rounds']}:{100 * p['accuracy']:.1f}%" for p in budget["points"])
        lines.append(f"accuracy by round budget: {points}")
        lines.append(f"  {_fit_text(budget['fit'])}")
    else:
        lines.append("accuracy by round budget: run with --max-rounds-sweep 1-6 to record it")
    cost = q.get("cost")
    if cost:
        share = cost["appended_share"]
        lines.append(f"tokens per question: input {cost['mean_input']:,.0f} ({pct(cost['input_share'])}) output "
                     f"{cost['mean_output']:,.0f}; computed {cost['mean_computed']:,.0f}, from cache "
                     f"{cost['mean_cached']:,.0f}; appended: pages {pct(share['pages'])} · tool outputs "
                     f"{pct(share['observations'])} · turns {pct(share['turn'])}")
        fit = cost.get("fit")
        if fit:
            lines.append(f"  Tokens ≈ {fit['alpha']:,.0f}·P + {fit['beta']:.2f}·Σ|y| + {fit['gamma']:,.0f}·T "
                         f"(R² {num(fit['r2'])}; mean P {cost['mean_pages_in_context']:.1f}, Σ|y| "
                         f"{cost['mean_observation_tokens']:,.0f}, T {cost['mean_turns']:.2f})"
                         + ("; P is the same for every question, so α·P is also the fixed prompt's cost"
                            if fit.get("pages_constant") else ""))
        if cost["later_rounds_input"]:
            lines.append(f"  later rounds (2+): {pct(cost['later_rounds_cache_share'])} of prompt tokens from cache "
                         f"({cost['later_rounds_cached']:,} of {cost['later_rounds_input']:,})")
    if q["tool_calls"]:
        lines.append("tool calls: " + " · ".join(f"{name} {count}" for name, count in q["tool_calls"].items()))
    return lines


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows] + [""]


def qguide_markdown(q: dict) -> list[str]:
    """The Q-Guide section of report.md."""
    lines = ["## Q-Guide", "", *(f"- {line.strip()}" for line in qguide_lines(q)[:2]), ""]
    lines += ["### Reliability per confidence level", ""] + _table(
        ["σ", "committed", "correct", "ρ", "95% CI", "ρ/ρ(high)", "said Unknown"],
        [[r["level"], str(r["committed"]), str(r["correct"]), pct(r["rho"]), ci_text(r["rho_ci"]),
          num(r["relative"], 2), str(r["abstained"])] for r in q["reliability"]])
    lines += ["### Coverage vs accuracy by gate τ (no verification)", ""] + _table(
        ["τ", "answered", "coverage", "selective accuracy", "overall accuracy"],
        [[c["gate"], str(c["answered"]), pct(c["coverage"]), pct(c["selective_accuracy"]), pct(c["accuracy"])]
         for c in q["coverage"]])
    budget = q.get("budget")
    if budget:
        fitted = budget["fit"].get("fitted") or [None] * len(budget["points"])
        lines += ["### Accuracy by round budget", "", _fit_text(budget["fit"]), ""] + _table(
            ["T_max", "correct", "accuracy", "fit"],
            [[str(p["max_rounds"]), str(p["correct"]), pct(p["accuracy"]), pct(f)] for p, f in zip(budget["points"], fitted)])
    lines += [f"- {line.strip()}" for line in qguide_lines(q) if line.lstrip().startswith(("tokens", "Tokens", "later",
                                                                                             "tool calls"))]
    return lines + [""]


def qguide_html(q: dict) -> str:
    """The Q-Guide section of report.html: the budget curve with its fit, then the lines of the terminal block."""
    from html import escape

    from engine.eval.reports.svg import line_chart

    parts = ["<h2>Q-Guide</h2>"]
    budget = q.get("budget")
    if budget:
        observed = [(p["max_rounds"], p["accuracy"]) for p in budget["points"]]
        series = [("observed", observed)]
        if budget["fit"].get("fitted"):
            series.append(("fit", [(p["max_rounds"], f) for p, f in zip(budget["points"], budget["fit"]["fitted"])]))
        parts.append(line_chart(series, element_id="plot-qguide-budget", title="Accuracy vs round budget T_max",
                                x_label="T_max (policy turns; the last submits)", y_label="accuracy", y_range=(0.0, 1.0)))
        parts.append(f'<p class="note">{escape(_fit_text(budget["fit"]))}</p>')
    parts.append("<pre>" + escape("\n".join(qguide_lines(q))) + "</pre>")
    return "\n".join(parts)
