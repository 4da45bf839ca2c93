"""How every report writes a number: percentages, fixed digits and confidence intervals ("—" when absent)."""

from __future__ import annotations

__all__ = ["pct", "num", "ci_text", "count", "judged_accuracy"]


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def count(value: int | None) -> str:
    """A count, or "–" where it was not measured (MuDABench coverage of an agent that keeps no records)."""
    return "–" if value is None else str(value)


def num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def ci_text(ci, as_percent: bool = True, digits: int = 2) -> str:
    if not ci:
        return "—"
    low, high = ci
    return f"[{100 * low:.1f}, {100 * high:.1f}]" if as_percent else f"[{low:.{digits}f}, {high:.{digits}f}]"


def judged_accuracy(accuracy: float | None, clipped: str | None) -> str:
    """The judge's corrected accuracy as a figure, or what a clipped correction can say instead.

    A judged raw share below 1 - q0 (the share this judge accepts among wrong answers) corrects to
    less than 0 and is clipped: the accuracy of the judged part is then below what the judge can
    measure, which is not the same as 0 %. Items MADQA's first stage decided still count.
    """
    if clipped == "floor":
        return "below the judge's floor" if not accuracy else f"{pct(accuracy)}, its judged part below the judge's floor"
    if clipped == "ceiling":
        return f"{pct(accuracy)}, its judged part above the judge's ceiling"
    return pct(accuracy)
