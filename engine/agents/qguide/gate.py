"""Q-Guide's sufficiency gate φ and the verification rule (Section 3.1, Eq. 2-3; Appendix E).

A submission carries a self-reported confidence σ ∈ low ≺ med ≺ high. It is accepted as it
stands when σ ⪰ τ (the gate, default τ = med). Below τ it is not answered directly: one
verification turn re-checks the candidate against the recorded observations O_t only, and
the answer stands only when the verdict names an observation that states it; otherwise it
becomes "Unknown" (an abstention). With no observations recorded there is nothing that could
support it, so it becomes "Unknown" without a model call.

Decisions, as recorded in the trajectory: "passed" (σ ⪰ τ), "verified" (below τ, supported),
"rewritten" (below τ, unsupported → Unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.agents.qguide.protocol import LEVELS

__all__ = ["UNKNOWN", "passes_gate", "Verdict", "judge_verdict", "level_rank"]

UNKNOWN = "Unknown"  # DocVQA-2026's answer for "the document does not say"


def level_rank(level: str) -> int:
    """0, 1, 2 for low, med, high."""
    if level not in LEVELS:
        raise ValueError(f"confidence {level!r} is not one of {', '.join(LEVELS)}")
    return LEVELS.index(level)


def passes_gate(confidence: str, gate: str) -> bool:
    """φ's threshold: σ ⪰ τ."""
    return level_rank(confidence) >= level_rank(gate)


@dataclass(slots=True, frozen=True)
class Verdict:
    supported: bool  # the answer stands
    observation: int  # the observation (1-based) the verdict names; 0 for none
    reason: str  # why, in words, for the trajectory


def judge_verdict(claimed: bool, index: int, observations_ok: list[bool]) -> Verdict:
    """Decide verification from the model's verdict: supported only when it names a real observation.

    Args:
        claimed: the model's "supported".
        index: the observation it names (1-based; 0 = none).
        observations_ok: for each recorded observation, whether it holds content (not an error).
    """
    if not claimed:
        return Verdict(False, index, "the verification turn found no observation stating the answer")
    if not 1 <= index <= len(observations_ok):
        return Verdict(False, index, f"the verdict names observation {index}, which does not exist")
    if not observations_ok[index - 1]:
        return Verdict(False, index, f"the verdict names observation {index}, a failed tool call")
    return Verdict(True, index, f"observation {index} states the answer")
