"""Q-Guide's analyses of a run (Section 5, Appendices C–F), from the "qguide" record of each trajectory.

- reliability ρ(ℓ) = Pr[correct | σ = ℓ] over committed submissions (not "Unknown"), scored
  before the gate, with Wilson intervals, and relative to ρ(high) (Appendix E, Table 6);
- the gate at the run's τ: submissions passed, verified, rewritten to Unknown, or missing;
- coverage vs accuracy at each τ: with the gate at τ and no verification, the questions whose
  submission has σ ⪰ τ are answered (coverage) and the rest abstain; accuracy among the
  answered (selective) and over all questions;
- the accuracy-vs-budget curve over the swept T_max with its saturating fit (`budget.py`);
- token cost per question: input (every call's whole prompt, what a stateless client sends)
  and output, the appended tokens split into pages / tool outputs / turn text, a least-squares
  fit Tokens ≈ α·P + β·Σ|y| + γ·T (P pages in context, Σ|y| tool-output tokens, T policy
  turns), and how much of the later rounds' prompts came from the KV cache;
- tool calls per tool (the question-conditioned tool use of Figure 5).
Correctness is ANLS* ≥ 0.5 against the gold variants, as the report's accuracy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.eval.analyses.budget import fit_saturating
from engine.eval.stats import wilson_interval

__all__ = ["qguide_analyses", "LEVELS", "section"]

LEVELS = ("low", "med", "high")
DECISIONS = ("passed", "verified", "rewritten", "submit_unknown", "no_submission", "failed")


def _unknown(answer) -> bool:
    parts = answer if isinstance(answer, list) else [answer]
    return not parts or all(str(p).strip().lower() in ("", "unknown") for p in parts)


def _reliability(records: list[tuple[dict, list]], is_correct: Callable, level: float) -> list[dict]:
    rows = []
    for name in LEVELS:
        at = [(q, gold) for q, gold in records if q.get("confidence") == name]
        committed = [(q, gold) for q, gold in at if not _unknown(q.get("submitted"))]
        correct = sum(1 for q, gold in committed if is_correct(q["submitted"], gold))
        n = len(committed)
        rows.append({"level": name, "submissions": len(at), "committed": n, "abstained": len(at) - n,
                     "correct": correct, "rho": correct / n if n else None,
                     "rho_ci": list(wilson_interval(correct, n, level)) if n else None})
    high = rows[-1]["rho"]
    for row in rows:
        row["relative"] = row["rho"] / high if row["rho"] is not None and high else None
    return rows


def _coverage(records: list[tuple[dict, list]], is_correct: Callable, n: int) -> list[dict]:
    rows = []
    for gate in LEVELS:
        covered = [(q, gold) for q, gold in records if q.get("confidence") in LEVELS[LEVELS.index(gate):]
                   and not _unknown(q.get("submitted"))]
        correct = sum(1 for q, gold in covered if is_correct(q["submitted"], gold))
        rows.append({"gate": gate, "answered": len(covered), "coverage": len(covered) / n if n else None,
                     "selective_accuracy": correct / len(covered) if covered else None,
                     "accuracy": correct / n if n else None})
    return rows


def _budget_curve(records: list[tuple[dict, list]], is_correct: Callable, n: int) -> dict | None:
    budgets = sorted({int(k) for q, _ in records for k in q.get("budget", {})})
    if len(budgets) < 2:
        return None
    rows = []
    for budget in budgets:
        answered = [(q["budget"][str(budget)], gold) for q, gold in records if str(budget) in q.get("budget", {})]
        correct = sum(1 for result, gold in answered if is_correct(result["answer"], gold))
        rounds: dict[str, int] = {}
        for result, _ in answered:
            rounds[str(result.get("rounds", 0))] = rounds.get(str(result.get("rounds", 0)), 0) + 1
        rows.append({"max_rounds": budget, "correct": correct, "accuracy": correct / n if n else 0.0,
                     # the budget bound where the limit ended an episode that wanted more (Eq. 3's submit_unknown,
                     # or no submission on a forced turn); a budget that binds nowhere cannot change accuracy
                     "cut_by_limit": sum(1 for result, _ in answered
                                         if result.get("decision") in ("submit_unknown", "no_submission")),
                     "rounds_used": dict(sorted(rounds.items(), key=lambda kv: int(kv[0])))})
    fit = fit_saturating([r["max_rounds"] for r in rows], [r["accuracy"] for r in rows])
    return {"points": rows, "fit": _stored(fit)}


FIT_DECIMALS = 6  # fitted coefficients are stored rounded: the last digits of a least-squares solve differ by CPU


def _stored(fit: dict | None) -> dict | None:
    """A fit as the report stores it: every float rounded to FIT_DECIMALS (AVX2 and AVX-512 machines disagreed in
    the 14th digit of the token-cost fit, and a stored table then failed its --check; issue 50 item 8)."""
    if fit is None:
        return None

    def rounded(value):
        if isinstance(value, float):
            return round(value, FIT_DECIMALS)
        return [rounded(v) for v in value] if isinstance(value, list) else value  # the fitted curve, its steps

    return {key: rounded(value) for key, value in fit.items()}


def _cost(records: list[tuple[dict, list]]) -> dict | None:
    costs = [q["cost"] for q, _ in records if q.get("cost")]
    if not costs:
        return None
    mean = lambda key: float(np.mean([c[key] for c in costs]))  # noqa: E731
    appended = {key: sum(c[key] for c in costs) for key in ("pages", "observations", "turn")}
    whole = sum(appended.values()) or 1
    tokens = np.array([c["input"] + c["output"] for c in costs], dtype=np.float64)
    design = np.array([[c["pages_in_context"], c["observations"], c["turns"]] for c in costs], dtype=np.float64)
    fit = None
    if len(costs) >= 3 and np.linalg.matrix_rank(design) == 3:
        coef, *_ = np.linalg.lstsq(design, tokens, rcond=None)
        residual = tokens - design @ coef
        spread = float(((tokens - tokens.mean()) ** 2).sum())
        fit = _stored({"alpha": float(coef[0]), "beta": float(coef[1]), "gamma": float(coef[2]),
                       "r2": 1.0 - float(residual @ residual) / spread if spread else None,
                       "pages_constant": bool(np.ptp(design[:, 0]) == 0)})  # then α·P is the fixed prompt's cost too
    later_input = sum(c["later_rounds_input"] for c in costs)
    return {"questions": len(costs), "mean_input": mean("input"), "mean_output": mean("output"),
            "input_share": mean("input") / (mean("input") + mean("output")) if mean("input") + mean("output") else None,
            "mean_computed": mean("computed"), "mean_cached": mean("cached"),
            "appended_share": {key: value / whole for key, value in appended.items()},
            "mean_pages_in_context": mean("pages_in_context"), "mean_turns": mean("turns"),
            "mean_observation_tokens": mean("observations"), "fit": fit,
            "later_rounds_input": later_input, "later_rounds_cached": sum(c["later_rounds_cached"] for c in costs),
            "later_rounds_cache_share": sum(c["later_rounds_cached"] for c in costs) / later_input if later_input else None,
            "branch_calls": sum(c.get("branch_calls", 0) for c in costs)}


def qguide_analyses(questions, episodes, is_correct: Callable, level: float = 0.95) -> dict | None:
    """Every Q-Guide analysis of a run; None when no trajectory holds a "qguide" record.

    Args:
        questions: the gold questions (the denominator; a question without an episode counts wrong).
        episodes: item id -> trajectory episode (`engine.eval.trajectories.Episode`).
        is_correct: (answer, gold variants) -> bool.
    """
    records = [(episodes[q.id].extra["qguide"], q.answer_variants) for q in questions
               if q.id in episodes and isinstance(episodes[q.id].extra.get("qguide"), dict)]
    if not records:
        return None
    n = len(questions)
    decisions = {name: sum(1 for q, _ in records if q.get("decision") == name) for name in DECISIONS}
    submitted = sum(1 for q, _ in records if q.get("confidence") is not None)
    below = decisions["verified"] + decisions["rewritten"]
    tools: dict[str, int] = {}
    for q, _ in records:
        for name, count in q.get("tool_calls", {}).items():
            tools[name] = tools.get(name, 0) + count
    first = records[0][0]
    return {
        "n": n, "episodes": len(records), "gate": first.get("gate"), "tools_offered": first.get("tools"),
        "max_rounds": first.get("max_rounds"), "at_limit": first.get("at_limit"),
        "modes": {m: sum(1 for q, _ in records if q.get("mode") == m)
                  for m in ("document", "chunked", "retrieved", "collection")},
        "decisions": decisions, "submitted": submitted,
        "routed_to_verification": below / submitted if submitted else None,
        "rewritten_of_routed": decisions["rewritten"] / below if below else None,
        "abstained": sum(1 for q, _ in records if _unknown(q.get("answer"))),
        "reliability": _reliability(records, is_correct, level),
        "coverage": _coverage(records, is_correct, n),
        "budget": _budget_curve(records, is_correct, n),
        "cost": _cost(records),
        "tool_calls": dict(sorted(tools.items(), key=lambda kv: -kv[1])),
        "mean_turns": float(np.mean([q.get("turns", 0) for q, _ in records])),
        # runs since T_max counts turns as Eq. 3 does (T_max = 1: no tool); older runs counted tool rounds
        **({"t_max_counts": first["t_max_counts"], "page_text": first.get("page_text")}
           if first.get("t_max_counts") else {}),
    }


def section(inputs) -> dict | None:
    """The registered report section (engine/eval/sections.py): None without trajectories or Q-Guide records."""
    if inputs.episodes is None:
        return None
    from engine.eval.metrics.anls import ACCURACY_THRESHOLD, ANLSScorer

    scorer = ANLSScorer()
    return qguide_analyses([question for question, _ in inputs.pairs], inputs.episodes,
                           lambda answer, variants: scorer(answer, variants) >= ACCURACY_THRESHOLD)
