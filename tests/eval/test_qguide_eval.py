"""Q-Guide's analyses in `dossier eval`: reliability, coverage per τ, the budget fit, the token-cost split."""

import json

import numpy as np
import pytest

from engine.datasets.formats import Question
from engine.eval.analyses.budget import fit_saturating, saturating
from engine.eval.analyses.qguide import qguide_analyses
from engine.eval.trajectories import parse_episode


def test_fit_recovers_the_papers_curve_and_its_saturation_point():
    t = np.arange(1, 7)
    fit = fit_saturating(t, saturating(t, 0.659, 0.738, 1.036))
    assert fit["A"] == pytest.approx(0.659, abs=1e-6) and fit["B"] == pytest.approx(0.738, abs=1e-6)
    assert fit["k"] == pytest.approx(1.036, abs=1e-5) and fit["r2"] == pytest.approx(1.0)
    assert fit["t_star"] == pytest.approx(3.22, abs=0.01)  # the paper's t* ≈ 3.2
    noisy = fit_saturating(t, [0.40, 0.55, 0.65, 0.65, 0.66, 0.65])  # the paper's observed points, roughly
    assert 0.95 < noisy["r2"] < 1.0 and 2.5 < noisy["t_star"] < 4.0
    assert fit_saturating(t, [0.2] * 6)["k"] is None and fit_saturating([1, 2], [0.1, 0.2])["k"] is None
    falling = fit_saturating(t, [1 / 3, 0, 0, 0, 0, 0])  # a real run: right when forced at once, wrong after tools
    assert falling["falling"] and falling["k"] is None and falling["A"] is None


def _episode(qid, confidence, submitted, decision, answer, budget, cost):
    record = {"gate": "med", "max_rounds": 3, "mode": "document", "tools": ["text_recovery"], "turns": 2,
              "confidence": confidence, "submitted": submitted, "decision": decision, "answer": answer,
              "tool_calls": {"text_recovery": 1}, "budget": {str(k): {"answer": v} for k, v in budget.items()},
              "cost": cost}
    return parse_episode({"id": qid, "question": "?", "steps": [], "final": {"answer": answer}, "qguide": record}, "t")


def _cost(pages, observations, turns, cached_later):
    tokens = 300 * pages + observations + 100 * turns
    return {"pages_in_context": pages, "turns": turns, "calls": turns, "input": tokens - 20, "output": 20,
            "computed": tokens // 2, "cached": tokens // 2, "pages": 300 * pages, "observations": observations,
            "turn": 100 * turns, "later_rounds_input": 1000, "later_rounds_cached": cached_later}


def test_analyses_on_hand_made_episodes():
    questions = [Question(q, "?", [["right"]], []) for q in ("a", "b", "c", "d", "e")]
    episodes = {e.id: e for e in [
        _episode("a", "high", ["right"], "passed", ["right"], {1: ["Unknown"], 2: ["right"], 3: ["right"]},
                 _cost(2, 100, 2, 950)),
        _episode("b", "med", ["wrong"], "passed", ["wrong"], {1: ["wrong"], 2: ["wrong"], 3: ["wrong"]},
                 _cost(3, 50, 3, 900)),
        _episode("c", "low", ["right"], "verified", ["right"], {1: ["Unknown"], 2: ["Unknown"], 3: ["right"]},
                 _cost(1, 400, 3, 920)),
        _episode("d", "low", ["Unknown"], "rewritten", ["Unknown"], {1: ["Unknown"], 2: ["Unknown"], 3: ["Unknown"]},
                 _cost(4, 0, 1, 990)),
    ]}  # e has no episode: counted wrong everywhere
    q = qguide_analyses(questions, episodes, lambda answer, gold: answer == gold[0])
    rel = {r["level"]: r for r in q["reliability"]}
    assert (rel["high"]["rho"], rel["med"]["rho"], rel["low"]["rho"]) == (1.0, 0.0, 1.0)
    assert rel["low"]["committed"] == 1 and rel["low"]["abstained"] == 1 and rel["med"]["relative"] == 0.0
    cov = {c["gate"]: c for c in q["coverage"]}
    assert (cov["high"]["answered"], cov["high"]["selective_accuracy"], cov["high"]["accuracy"]) == (1, 1.0, 0.2)
    assert (cov["med"]["coverage"], cov["med"]["selective_accuracy"]) == (0.4, 0.5)
    assert (cov["low"]["answered"], cov["low"]["accuracy"]) == (3, 0.4)
    assert [p["accuracy"] for p in q["budget"]["points"]] == [0.0, 0.2, 0.4]
    assert q["decisions"]["passed"] == 2 and q["routed_to_verification"] == 0.5 and q["rewritten_of_routed"] == 0.5
    cost = q["cost"]
    assert cost["fit"]["alpha"] == pytest.approx(300) and cost["fit"]["beta"] == pytest.approx(1.0)
    assert cost["fit"]["gamma"] == pytest.approx(100) and cost["fit"]["r2"] == pytest.approx(1.0)
    assert cost["later_rounds_cache_share"] == pytest.approx((950 + 900 + 920 + 990) / 4000)
    assert sum(cost["appended_share"].values()) == pytest.approx(1.0)


def test_dossier_eval_prints_the_qguide_block_for_a_swept_run(tmp_path):
    """A scripted swept run scored end to end: its T_max=6 point is the run's own accuracy."""
    from typer.testing import CliRunner

    from engine.cli.main import app
    from tests.agents.test_qguide import _budget_policy, make_corpus, q, run

    corpus = make_corpus(tmp_path / "c")
    (tmp_path / "runs").mkdir()
    questions = [q(), Question("q2", "What was capital expenditure?", [["done"]], [], {"document": "memo"})]
    run(tmp_path / "runs", corpus, _budget_policy, questions, max_rounds=6, max_rounds_sweep="1-6")
    result = CliRunner().invoke(app, ["eval", str(tmp_path / "runs" / "run0"), "--no-drift", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    points = report["qguide"]["budget"]["points"]
    assert [p["max_rounds"] for p in points] == [1, 2, 3, 4, 5, 6]
    assert points[-1]["accuracy"] == report["accuracy"] == 0.5  # q2's gold is "done", the T_max=6 answer
    assert [p["accuracy"] for p in points] == [0.0, 0.0, 0.0, 0.0, 0.5, 0.5]  # "done" at turn 5, after 4 rounds
    assert report["qguide"]["at_limit"] == "unknown"
    assert report["qguide"]["decisions"]["passed"] == 2 and report["steps"] is not None
    human = CliRunner().invoke(app, ["eval", str(tmp_path / "runs" / "run0"), "--no-drift"])
    assert ("Q-Guide: 2 episodes (document 2), gate τ=med, T_max=6 turns as Eq. 3 counts them, T_max - 1 rounds of "
            "tools (at the limit: unknown; page text withheld)") in human.output
    assert "submit_unknown at T_max 0" in human.output
    assert "accuracy by round budget: T=1:0.0% T=2:0.0%" in human.output and "fit acc(t)" in human.output
    assert "reliability ρ(σ)" in human.output and "appended: pages" in human.output
    assert "accuracy at search budget" not in human.output
    assert "## Q-Guide" in (tmp_path / "runs" / "run0" / "eval" / "report.md").read_text()
    assert "plot-qguide-budget" in (tmp_path / "runs" / "run0" / "eval" / "report.html").read_text()


def test_a_step_curve_gets_one_fit_whatever_the_rounding():
    """1/13 right at T = 1, then 2/13 (qguide-sample's sweep): every k past ~14 fits exactly, and the search used
    to stop wherever rounding left it (k 33.818 and B 3.74e13 on one CPU, 33.82 and 3.75e13 on another). The
    least steep exact k is taken instead: the same on every machine, and a perturbation far below the printed
    precision does not move it."""
    t = np.arange(1, 5)
    step = [1 / 13, 2 / 13, 2 / 13, 2 / 13]
    fit = fit_saturating(t, step)
    assert fit["r2"] == pytest.approx(1.0) and 5 < fit["k"] < 25 and fit["A"] == pytest.approx(2 / 13)
    nudged = fit_saturating(t, [v + 1e-15 * i for i, v in enumerate(step)])
    assert round(nudged["k"], 3) == round(fit["k"], 3) and f"{nudged['B']:.3g}" == f"{fit['B']:.3g}"
