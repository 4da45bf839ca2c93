"""Issue 50 item 3: a judge calibrated on its own suite's known verdicts, and a correction that moves only what the
judge decided and says so when it clips."""

import json
import random

import pytest
from typer.testing import CliRunner

from engine.cli.main import app
from engine.datasets.formats import Prediction, Question, write_jsonl
from engine.eval.calibration import JudgeCalibration
from engine.eval.evaluate import EvalConfig, evaluate
from engine.eval.judge import ScriptedJudge, Verdict, semantic_score
from engine.eval.known_verdicts import known_verdict_items, perturb_numbers
from engine.eval.metrics.anls import ANLSScorer
from engine.eval.metrics.answers import exact_match
from engine.eval.reports.markdown import headline_rows

runner = CliRunner()


def _q(qid, answer, question=None):
    return Question(id=qid, question=question or f"What is asked in {qid}?", answer_variants=[[answer]], evidence=[])


SUITE = [_q("f1", "$1577.00", "What is the FY2018 capital expenditure (USD millions) for 3M?"),
         _q("f2", "1.9%"), _q("f3", "JnJ sold its inventory 2.7 times in FY2022."),
         _q("f4", "Yes, the margin fell by 1.1% between FY2022 and FY2023."),
         _q("f5", "Helen Marsh"), _q("f6", "$11,588.00")]


def test_perturbed_amounts_change_by_thirty_percent_and_keep_format_years_dates_and_names():
    rng = random.Random(0)
    for _ in range(50):
        out = perturb_numbers("$1,577.00 in FY2022 (COVID-19), from August 15, 2022", rng)
        amount = float(out.split(" ")[0][1:].replace(",", ""))
        assert abs(amount / 1577 - 1) >= 0.29 and out.count(".") == 1
        assert ("," in out.split(" ")[0]) == (amount >= 1000)  # thousands separators as the gold wrote them
        assert out.endswith(" in FY2022 (COVID-19), from August 15, 2022")
    assert perturb_numbers("Helen Marsh", rng) is None and perturb_numbers("in 2022", rng) is None
    assert perturb_numbers("0.0%", rng) != "0.0%"


def test_known_verdict_items_reach_the_judge_and_carry_their_verdict_by_construction():
    items, dropped = known_verdict_items(SUITE, seed=0)
    assert items == known_verdict_items(SUITE, seed=0)[0]  # seeded: the same items every time
    kinds = {(i["id"].split(":")[0], i["kind"]) for i in items}
    assert {k for q, k in kinds if q == "f1"} == {"gold", "perturbed", "other", "refusal"}
    assert ("f4", "perturbed") not in kinds  # a yes/no answer keeps its verdict on the yes, not the figures
    assert ("f5", "perturbed") not in kinds  # no amount to change
    scorer = ANLSScorer()
    by_id = {q.id: q for q in SUITE}
    for item in items:
        assert item["human"] == ("correct" if item["kind"] == "gold" else "incorrect")
        gold = by_id[item["id"].split(":")[0]].answer_variants
        _, source = semantic_score(item["question"], gold, item["answer"], exact=exact_match(item["answer"], gold),
                                   anls=scorer(item["answer"], gold), judge=lambda *_: "incorrect")
        assert source == "judge"  # what MADQA's first stage would decide is not calibration for the judge
        if item["kind"] == "other":
            assert not item["answer"].lstrip("The answer is ").lower().startswith(("yes", "no"))
    assert set(dropped) == {"gold", "perturbed", "other", "refusal"}


def test_calibrate_judge_on_known_verdicts(tmp_path, monkeypatch):
    from engine.eval.judging import BatchedJudge

    def judge_all(self, items, on_verdict):  # a lenient judge: it accepts every answer that names a figure
        for item in items:
            text = " ".join(item.answer) if isinstance(item.answer, tuple) else item.answer
            on_verdict(item, Verdict.correct if any(c.isdigit() for c in text) else Verdict.incorrect, "{}")

    monkeypatch.setattr(BatchedJudge, "judge_all", judge_all)
    questions = tmp_path / "questions.jsonl"
    write_jsonl(questions, [q.to_json() for q in SUITE])
    out = tmp_path / "calibration.json"
    result = runner.invoke(app, ["eval", "calibrate-judge", "--judge", "some-model", "--known-verdicts",
                                 str(questions), "--skip", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    stored = json.loads(out.read_text())
    kinds = stored["known_verdicts"]["kinds"]
    # gold: five of six golds hold a figure (not "Helen Marsh"); every perturbed one does; refusals none
    assert kinds["gold"] == {"items": 6, "accepted": 5, "truth": "right"} and kinds["refusal"]["accepted"] == 0
    assert kinds["perturbed"]["accepted"] == kinds["perturbed"]["items"] == 4  # f1, f2, f3, f6
    assert stored["q1"] == pytest.approx(5 / 6) and stored["m1"] == 6
    wrong = kinds["perturbed"]["items"] + kinds["other"]["items"] + kinds["refusal"]["items"]
    accepted_wrong = kinds["perturbed"]["accepted"] + kinds["other"]["accepted"]
    assert stored["m0"] == wrong and stored["q0"] == pytest.approx(1 - accepted_wrong / wrong)
    assert stored["q0_ci"][0] < stored["q0"] < stored["q0_ci"][1]
    assert "known verdicts from questions.jsonl (questions 1-6, seed 0)" in stored["labels"]
    assert "perturbed (wrong): judge accepted 4 of 4" in result.output
    # a run's real answers to the numeric questions join, right or wrong by the numeric scorer
    predictions = tmp_path / "predictions.jsonl"
    write_jsonl(predictions, [Prediction(id="f1", question=SUITE[0].question, answer=["about 1,577 million"],
                                         citations=[]).to_json(),
                              Prediction(id="f2", question=SUITE[1].question, answer=["roughly 2.4 %"],
                                         citations=[]).to_json(),
                              Prediction(id="f5", question=SUITE[4].question, answer=["Helen"], citations=[]).to_json()])
    with_answers = runner.invoke(app, ["eval", "calibrate-judge", "--judge", "some-model", "--known-verdicts",
                                       str(questions), "--answers", str(predictions), "--out", str(out)])
    assert with_answers.exit_code == 0, with_answers.output
    kinds = json.loads(out.read_text())["known_verdicts"]["kinds"]
    assert kinds["answer, right"] == {"items": 1, "accepted": 1, "truth": "right"}  # f5's gold is not a number
    assert kinds["answer, wrong"] == {"items": 1, "accepted": 1, "truth": "wrong"}
    assert json.loads(out.read_text())["m1"] == 7
    refused = runner.invoke(app, ["eval", "calibrate-judge", "--known-verdicts", str(questions)])
    assert refused.exit_code != 0 and "--judge" in str(refused.exception or refused.output)
    past = runner.invoke(app, ["eval", "calibrate-judge", "--judge", "m", "--known-verdicts", str(questions),
                               "--skip", "6"])
    assert past.exit_code != 0 and "no questions after --skip 6" in str(past.exception or past.output)


def _run(answers: dict[str, str]):
    gold = [_q(f"q{n}", "48,250") for n in range(10)]
    predictions = [Prediction(id=f"q{n}", question=gold[n].question, answer=[answers.get(f"q{n}", "I cannot say")],
                              citations=[]) for n in range(10)]
    return gold, predictions


def test_first_stage_zeros_stay_out_of_the_correction():
    # five refusals (the first stage's zeros) and five judged answers, three of them accepted
    gold, predictions = _run({f"q{n}": f"about {n}" for n in range(5)})
    judge = ScriptedJudge({g.question: "correct" for g in gold[:3]})
    calibration = JudgeCalibration(q1=0.9, q0=0.8, m1=40, m0=40)
    report = evaluate(gold, predictions, config=EvalConfig(judge=judge, bootstrap=0, calibration=calibration)).report
    assert report["semantic_raw"] == pytest.approx(0.3) and report["semantic_judged_raw"] == pytest.approx(0.6)
    # the judged half corrected alone: (0.6 + 0.8 - 1) / 0.7 = 0.571, over 10 items; pooling the zeros gave 0.143
    assert report["semantic_accuracy"] == pytest.approx(0.5 * 0.4 / 0.7)
    low, high = report["semantic_accuracy_ci"]
    assert 0.0 <= low < report["semantic_accuracy"] < high <= 0.5  # the refusals cannot be right
    assert report["semantic_clipped"] is None


def test_a_clipped_correction_says_below_the_judges_floor():
    gold, predictions = _run({f"q{n}": f"about {n}" for n in range(10)})
    judge = ScriptedJudge({gold[0].question: "correct"})  # 10 % accepted, below 1 - q0 = 20 %
    calibration = JudgeCalibration(q1=0.9, q0=0.8, m1=40, m0=40)
    result = evaluate(gold, predictions, config=EvalConfig(judge=judge, bootstrap=0, calibration=calibration))
    report = result.report
    assert report["semantic_accuracy"] == 0.0 and report["semantic_clipped"] == "floor"
    row = next(r for r in headline_rows(report) if r[0].startswith("accuracy (judge"))
    assert row[1] == "below the judge's floor" and "below 1 − q0 = 20.0%" in row[2]
    from scripts.results_common import _judged
    assert _judged({"accuracy": 0.0, "clipped": "floor"}) == "below the judge's floor"
    assert _judged({"accuracy": 0.25, "clipped": None}) == "25.0 %"
