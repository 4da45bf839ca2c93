"""Judge bias correction (Rogan-Gladen) and judge calibration from human labels.

MADQA corrects the judge's raw score p with the judge's measured sensitivity q1
(P[judge says correct | human says correct]) and specificity q0 (P[judge says incorrect |
human says incorrect]):  theta = (p + q0 - 1) / (q0 + q1 - 1), clipped to [0, 1].

The interval follows Lee et al., "How to correctly report LLM-as-a-judge evaluations", which
MADQA cites: it adds the calibration sample's uncertainty (m1 human-correct and m0
human-incorrect labels) to the test sample's, with add-two smoothing and a bias term. MADQA's
published harness skips the calibration term whenever q0 + q1 > 1.9 (`rogan_gladen_ci_simple`
here); we use the full interval by default because the paper says the interval covers both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from engine.datasets.formats import LineError, iter_jsonl
from engine.eval.judge import Verdict
from engine.eval.stats import wilson_interval, z_value
from tools.errors import DossierError

__all__ = [
    "JudgeCalibration",
    "rogan_gladen",
    "rogan_gladen_ci",
    "rogan_gladen_ci_simple",
    "calibrate_judge",
    "load_judge_labels",
]


@dataclass(slots=True, frozen=True)
class JudgeCalibration:
    """How far the judge can be trusted, measured against human labels."""

    q1: float = 0.98  # sensitivity: P(judge correct | human correct); MADQA measured 0.980
    q0: float = 1.0  # specificity: P(judge incorrect | human incorrect); MADQA measured 1.000
    m1: int = 152  # calibration items a human marked correct (MADQA: 152 of 200)
    m0: int = 48  # calibration items a human marked incorrect (MADQA: 48 of 200)

    def __post_init__(self) -> None:
        for name in ("q0", "q1"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise DossierError(f"judge {name} = {value} must lie between 0 and 1")
        if self.q0 + self.q1 <= 1.0:
            raise DossierError(
                f"q0 + q1 = {self.q0 + self.q1:.3f} <= 1: the judge is no better than chance and cannot be corrected"
            )
        if self.m0 < 0 or self.m1 < 0:
            raise DossierError(f"calibration counts must be >= 0, got m0={self.m0}, m1={self.m1}")


def rogan_gladen(raw: float, q0: float, q1: float) -> float:
    """Bias-corrected accuracy from the judge's raw mean score, clipped to [0, 1]."""
    if q0 + q1 <= 1.0:
        raise DossierError(f"q0 + q1 = {q0 + q1} must exceed 1 for the Rogan-Gladen correction")
    return min(1.0, max(0.0, (raw + q0 - 1.0) / (q0 + q1 - 1.0)))


def rogan_gladen_ci(raw: float, n: int, cal: JudgeCalibration, level: float = 0.95) -> tuple[float, float]:
    """Interval for the corrected accuracy covering test-sample and calibration-sample variance.

    Args:
        raw: the judge's mean score on the n test items.
        n: number of test items.
        cal: the judge's sensitivity, specificity and calibration sample sizes.
        level: confidence level.
    """
    if n <= 0:
        return (0.0, 1.0)
    z = z_value(level)
    z2 = z * z
    p = (n * raw + z2 / 2.0) / (n + z2)
    q0 = (cal.m0 * cal.q0 + 1.0) / (cal.m0 + 2.0)
    q1 = (cal.m1 * cal.q1 + 1.0) / (cal.m1 + 2.0)
    n_adj, m0_adj, m1_adj = n + z2, cal.m0 + 2.0, cal.m1 + 2.0
    if q0 + q1 <= 1.0:
        return (0.0, 1.0)
    theta = (p + q0 - 1.0) / (q0 + q1 - 1.0)
    bias = 2.0 * z2 * (-(1.0 - theta) * q0 * (1.0 - q0) / m0_adj + theta * q1 * (1.0 - q1) / m1_adj)
    variance = (
        p * (1.0 - p) / n_adj
        + (1.0 - theta) ** 2 * q0 * (1.0 - q0) / m0_adj
        + theta**2 * q1 * (1.0 - q1) / m1_adj
    )
    se = math.sqrt(variance) / (q0 + q1 - 1.0)
    return (max(0.0, theta + bias - z * se), min(1.0, theta + bias + z * se))


def rogan_gladen_ci_simple(raw: float, n: int, q0: float, q1: float, level: float = 0.95) -> tuple[float, float]:
    """MADQA harness's shortcut: binomial SE of the raw score, scaled by 1 / (q0 + q1 - 1)."""
    if n <= 0:
        return (0.0, 1.0)
    theta = rogan_gladen(raw, q0, q1)
    se = math.sqrt(raw * (1.0 - raw) / n) / (q0 + q1 - 1.0)
    z = z_value(level)
    return (max(0.0, theta - z * se), min(1.0, theta + z * se))


def _positive(value: object, where: str, field: str) -> bool:
    if isinstance(value, bool):
        return value
    try:
        return Verdict.coerce(value).score >= 0.5  # partial counts as judged correct, as in MADQA
    except DossierError:
        raise DossierError(f"{where}: {field} {value!r} is not correct/partial/incorrect, 1/0.5/0 or true/false") from None


def labelled_items(path: str | Path) -> tuple[list[dict], list[LineError]]:
    """The labelled items of a JSONL file (objects; anything else is a skipped line)."""
    errors: list[LineError] = []
    items = []
    for number, obj in iter_jsonl(path, errors):
        if isinstance(obj, dict):
            items.append({**obj, "_line": number})
        else:
            errors.append(LineError(str(path), number, "is not a JSON object"))
    return items, errors


def load_judge_labels(path: str | Path | list[dict]) -> tuple[list[tuple[bool, bool]], list[LineError]]:
    """Read (human, judge) label pairs from JSONL lines like {"human": "correct", "judge": "partial"}.

    `path` may also be the items themselves (dicts, as `labelled_items` returns them).
    """
    errors: list[LineError] = []
    pairs: list[tuple[bool, bool]] = []
    numbered = ([(item.get("_line", n), item) for n, item in enumerate(path, 1)] if isinstance(path, list)
                else iter_jsonl(path, errors))
    path = "labelled items" if isinstance(path, list) else path
    for number, obj in numbered:
        where = f"{path}:{number}"
        if not isinstance(obj, dict) or "human" not in obj or "judge" not in obj:
            errors.append(LineError(str(path), number, "needs both 'human' and 'judge' labels"))
            continue
        try:
            pairs.append((_positive(obj["human"], where, "human"), _positive(obj["judge"], where, "judge")))
        except DossierError as err:
            errors.append(LineError(str(path), number, str(err).split(": ", 1)[-1]))
    return pairs, errors


def calibrate_judge(pairs: list[tuple[bool, bool]], level: float = 0.95) -> dict:
    """Sensitivity q1 and specificity q0 of a judge from (human, judge) label pairs.

    Returns:
        {"q1", "q1_ci", "m1", "q0", "q0_ci", "m0", "n", "agreement"}; q1 (q0) is None when no
        item was labelled correct (incorrect) by the human.
    """
    if not pairs:
        raise DossierError("no labelled items: calibration needs lines with both 'human' and 'judge'")
    m1 = sum(1 for human, _ in pairs if human)
    m0 = len(pairs) - m1
    true_pos = sum(1 for human, judge in pairs if human and judge)
    true_neg = sum(1 for human, judge in pairs if not human and not judge)
    return {
        "q1": true_pos / m1 if m1 else None,
        "q1_ci": wilson_interval(true_pos, m1, level) if m1 else None,
        "m1": m1,
        "q0": true_neg / m0 if m0 else None,
        "q0_ci": wilson_interval(true_neg, m0, level) if m0 else None,
        "m0": m0,
        "n": len(pairs),
        "agreement": (true_pos + true_neg) / len(pairs),
    }
