"""Kuiper under steps, tokens and time (MADQA Appendix F.4) on a hand-made run whose values are worked out below."""

import pytest

from engine.datasets.formats import Prediction, Question
from engine.eval.analyses.effort import effort_measures, measures_of
from engine.eval.evaluate import EvalConfig, evaluate


def question(qid, answer):
    return Question.from_json({"id": qid, "question": f"Question {qid}?", "answer_variants": [[answer]],
                               "evidence": [{"document": "d", "page": 1}]}, "gold")


def prediction(qid, answer, searches, tokens=None, wall_s=None):
    obj = {"id": qid, "question": f"Question {qid}?", "answer": [answer], "search_history": ["q"] * searches}
    if tokens is not None:
        obj["tokens"] = dict(zip(("prefilled", "cached", "generated"), tokens))
    if wall_s is not None:
        obj["wall_s"] = wall_s
    return Prediction.from_json(obj, "pred")


# item  steps  prefilled+cached+generated = total  generated  seconds  correct
# A     1      10 + 0 + 5   = 15                   5          2.0      yes
# B     2      20 + 10 + 10 = 40                   10         1.0      no
# C     3      5 + 5 + 2    = 12                   2          4.0      yes
# D     4      (no tokens record, no wall_s)                           no
GOLD = [question("A", "alpha"), question("B", "beta"), question("C", "gamma"), question("D", "delta")]
PREDICTIONS = [prediction("A", "alpha", 1, (10, 0, 5), 2.0), prediction("B", "wrong", 2, (20, 10, 10), 1.0),
               prediction("C", "gamma", 3, (5, 5, 2), 4.0), prediction("D", "wrong", 4)]


def test_kuiper_per_measure_by_hand():
    report = evaluate(GOLD, PREDICTIONS, config=EvalConfig(bootstrap=0)).report
    measures = report["effort_measures"]["measures"]
    # steps: order A B C D, mean 1/2, D = .5 0 .5 0 -> K = 0.5, the report's own Kuiper
    assert measures["steps"]["kuiper"] == pytest.approx(0.5) == report["kuiper"]
    assert (measures["steps"]["n"], measures["steps"]["missing"]) == (4, 0)
    # total tokens: C (12, right) A (15, right) B (40, wrong), mean 2/3, D = 1/3 2/3 0 -> K = 2/3; D is missing
    assert measures["total_tokens"]["kuiper"] == pytest.approx(2 / 3)
    assert (measures["total_tokens"]["n"], measures["total_tokens"]["missing"]) == (3, 1)
    # generated tokens order C (2) A (5) B (10): the same as total tokens
    assert measures["generated_tokens"]["kuiper"] == pytest.approx(2 / 3)
    # seconds: B (1.0, wrong) A (2.0) C (4.0), mean 2/3, D = -2/3 -1/3 0 -> K = 2/3
    assert measures["seconds"]["kuiper"] == pytest.approx(2 / 3) and measures["seconds"]["missing"] == 1


def test_spearman_between_measures_by_hand():
    report = evaluate(GOLD, PREDICTIONS, config=EvalConfig(bootstrap=0)).report
    rho = {(p["a"], p["b"]): (p["rho"], p["n"]) for p in report["effort_measures"]["spearman"]}
    # over A B C: steps ranks 1 2 3, total-token ranks 2 3 1 -> Pearson of the ranks = -1/2
    assert rho[("steps", "total_tokens")] == (pytest.approx(-0.5), 3)
    assert rho[("total_tokens", "generated_tokens")] == (pytest.approx(1.0), 3)  # same order
    # generated ranks 2 3 1 against seconds ranks 2 1 3: deviations (0 1 -1)(0 -1 1) -> -1
    assert rho[("generated_tokens", "seconds")] == (pytest.approx(-1.0), 3)
    assert len(rho) == 6


def test_measures_of_reads_what_the_runner_writes_and_skips_the_rest():
    real = prediction("x", "a", 2, (317, 0, 74), 115.033)  # a record as runs/*/predictions.jsonl holds it
    assert measures_of(2, real) == {"steps": 2.0, "total_tokens": 391.0, "generated_tokens": 74.0,
                                    "seconds": 115.033}
    odd = Prediction.from_json({"id": "y", "question": "?", "answer": "a", "wall_s": "slow",
                                "tokens": {"prefilled": 3, "generated": True}}, "pred")
    assert measures_of(0, odd) == {"steps": None, "total_tokens": None, "generated_tokens": None, "seconds": None}
    assert measures_of(3, None)["steps"] == 3.0 and measures_of(3, None)["seconds"] is None


def test_undefined_measure_says_why_and_counts_items():
    rows = [({"steps": 1.0, "total_tokens": None, "generated_tokens": 0.0, "seconds": 5.0}, True),
            ({"steps": 2.0, "total_tokens": None, "generated_tokens": 0.0, "seconds": 5.0}, False)]
    out = effort_measures(rows)["measures"]
    assert out["total_tokens"] == {"kuiper": None, "n": 0, "missing": 2, "dropped": 0,
                                   "undefined": "no item has effort > 0"}
    assert out["generated_tokens"]["dropped"] == 2  # 0 tokens: dropped as effort 0 is for steps
    assert "same effort" in out["seconds"]["undefined"]
    assert out["steps"]["kuiper"] == pytest.approx(0.5)


def test_child_tokens_of_a_trajectory_count_in_the_token_measures():
    from engine.eval.trajectories import parse_episode

    # item  own tokens (p + c + g)   child_tokens        total  generated  correct
    # A     10 + 0 + 5   = 15        0 + 0 + 0           15     5          yes
    # B     20 + 10 + 10 = 40        90 + 0 + 10 = 100   140    20         no   (sub-calls: the costliest)
    # C     28 + 10 + 12 = 50        (no field: old run) 50     12         yes
    # D     35 + 10 + 15 = 60        (no trajectory)     60     15         no
    gold = [question(q, q.lower()) for q in "ABCD"]
    preds = [prediction("A", "a", 1, (10, 0, 5)), prediction("B", "wrong", 1, (20, 10, 10)),
             prediction("C", "c", 1, (28, 10, 12)), prediction("D", "wrong", 1, (35, 10, 15))]
    episodes = [parse_episode({"id": "A", "steps": [], "child_tokens": {"prefilled": 0, "cached": 0, "generated": 0}},
                              "t"),
                parse_episode({"id": "B", "steps": [], "child_tokens": {"prefilled": 90, "cached": 0, "generated": 10}},
                              "t"),
                parse_episode({"id": "C", "steps": []}, "t")]
    with_children = evaluate(gold, preds, episodes, EvalConfig(bootstrap=0)).report["effort_measures"]["measures"]
    # order A C D B, mean 1/2: D = .5 1 .5 0 -> K = 1
    assert with_children["total_tokens"]["kuiper"] == pytest.approx(1.0)
    assert with_children["generated_tokens"]["kuiper"] == pytest.approx(1.0)
    # without the trajectories (or with a run written before the field): the prediction's tokens alone,
    # order A B C D: D = .5 0 .5 0 -> K = 1/2
    alone = evaluate(gold, preds, config=EvalConfig(bootstrap=0)).report["effort_measures"]["measures"]
    assert alone["total_tokens"]["kuiper"] == pytest.approx(0.5) == alone["generated_tokens"]["kuiper"]
    assert measures_of(1, preds[1], episodes[1])["total_tokens"] == 140.0
    unreadable = parse_episode({"id": "B", "steps": [], "child_tokens": {"prefilled": "many", "generated": 4}}, "t")
    measured = measures_of(1, preds[1], unreadable)  # a count we cannot read: the total is unknown, not undercounted
    assert (measured["total_tokens"], measured["generated_tokens"]) == (None, 14.0)
