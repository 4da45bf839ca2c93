"""Wilson, McNemar, kappa, Spearman, Rogan-Gladen and judge calibration, against hand-worked numbers."""

import json

import pytest

from engine.eval.calibration import (
    JudgeCalibration,
    calibrate_judge,
    load_judge_labels,
    rogan_gladen,
    rogan_gladen_ci,
    rogan_gladen_ci_simple,
)
from engine.eval.stats import cohen_kappa, mcnemar_exact, pearson_r, rank_average, spearman_rho, wilson_interval
from tools.errors import DossierError


def test_wilson_interval_hand_computed():
    low, high = wilson_interval(8, 10)  # p = .8, z = 1.96: centre .7167, half-width .2266
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 10)[1] == pytest.approx(0.2775, abs=1e-4)  # all wrong still has width
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_mcnemar_exact_hand_computed():
    assert mcnemar_exact(1, 5) == pytest.approx(2 * (1 + 6) / 64)  # 0.21875
    assert mcnemar_exact(5, 1) == mcnemar_exact(1, 5)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0  # capped at 1
    assert mcnemar_exact(0, 10) == pytest.approx(2 / 1024)
    assert 0.0 < mcnemar_exact(400, 600) < 1e-9  # large counts: no overflow


def test_cohen_kappa_hand_computed():
    a = [1, 1, 0, 0, 1, 0]
    b = [1, 0, 0, 0, 1, 1]  # observed 4/6, chance .5 -> (2/3 - 1/2) / (1/2)
    assert cohen_kappa(a, b) == pytest.approx(1 / 3)
    assert cohen_kappa([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    assert cohen_kappa([1, 1], [1, 1]) is None  # chance agreement 1: undefined
    assert cohen_kappa([], []) is None


def test_spearman_and_ranks():
    assert rank_average([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]
    assert spearman_rho([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman_rho([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman_rho([1, 2, 3], [5, 5, 5]) is None
    assert pearson_r([1, 2, 3], [1, 2, 4]) == pytest.approx(0.98198, abs=1e-5)


def test_rogan_gladen_point_estimates():
    assert rogan_gladen(0.8, q0=1.0, q1=0.98) == pytest.approx(0.8 / 0.98)  # 0.8163
    assert rogan_gladen(0.99, q0=1.0, q1=0.98) == 1.0  # clipped
    assert rogan_gladen(0.05, q0=0.9, q1=0.9) == 0.0  # (0.05 - 0.1) / 0.8 < 0 -> clipped
    assert rogan_gladen(0.5, q0=0.9, q1=0.8) == pytest.approx(0.4 / 0.7)


def test_rogan_gladen_intervals_hand_worked():
    # Full interval, n = 100, raw = .5, q0 = 1, q1 = .98, m0 = 48, m1 = 152, z = 1.959964:
    # p~ = .5; q0~ = 49/50 = .98; q1~ = 149.96/154 = .973766; theta = .48/.953766 = .503268;
    # bias = -.000855; se = .050460/.953766 = .052906 -> .502413 +- .103694
    low, high = rogan_gladen_ci(0.5, 100, JudgeCalibration(q1=0.98, q0=1.0, m1=152, m0=48))
    assert low == pytest.approx(0.39872, abs=2e-4) and high == pytest.approx(0.60611, abs=2e-4)
    # Harness shortcut: theta = .8/.98 = .816327, se = .04/.98, +- 1.96 * .040816
    low, high = rogan_gladen_ci_simple(0.8, 100, q0=1.0, q1=0.98)
    assert low == pytest.approx(0.73633, abs=1e-4) and high == pytest.approx(0.89633, abs=1e-4)
    assert rogan_gladen_ci(0.5, 0, JudgeCalibration()) == (0.0, 1.0)


def test_calibration_rejects_useless_judges():
    with pytest.raises(DossierError, match="no better than chance"):
        JudgeCalibration(q1=0.5, q0=0.5)
    with pytest.raises(DossierError, match="between 0 and 1"):
        JudgeCalibration(q1=1.2)


def test_calibrate_judge_from_labels(tmp_path):
    lines = ([{"human": "correct", "judge": "correct"}] * 9 + [{"human": "correct", "judge": "incorrect"}]
             + [{"human": "incorrect", "judge": "incorrect"}] * 3 + [{"human": 0, "judge": "partial"}]
             + [{"human": True}])  # the last line has no judge label
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    pairs, errors = load_judge_labels(path)
    assert len(pairs) == 14 and len(errors) == 1 and "judge" in errors[0].reason
    result = calibrate_judge(pairs)
    assert (result["q1"], result["m1"]) == (0.9, 10)
    assert (result["q0"], result["m0"]) == (0.75, 4)  # partial counts as judged correct
    assert result["agreement"] == pytest.approx(12 / 14)
    assert result["q1_ci"][0] < 0.9 < result["q1_ci"][1]
    with pytest.raises(DossierError):
        calibrate_judge([])


def test_bad_label_values_are_reported(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"human": "maybe", "judge": "correct"}\n')
    pairs, errors = load_judge_labels(path)
    assert pairs == [] and "'maybe'" in errors[0].reason
