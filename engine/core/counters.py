"""Token and time counters, kept per request, per session and engine-wide."""

from dataclasses import asdict, dataclass, fields

__all__ = ["Counters"]


@dataclass(slots=True)
class Counters:
    # Prompt tokens run through the model (new segments, recomputation after preemption).
    tokens_prefilled: int = 0
    # Prompt tokens whose KV came from the cache (the session's own history or a shared prefix).
    tokens_cached: int = 0
    # Tokens of earlier turns present when a turn was submitted (what a stateless client re-sends).
    history_tokens: int = 0
    # Of those history tokens, how many were served from the cache.
    history_tokens_cached: int = 0
    # Tokens sampled.
    tokens_generated: int = 0
    # Forward passes (engine-wide), or passes a session/request took part in.
    forward_steps: int = 0
    # Wall time of those forward steps, seconds (scheduling + forward + sampling).
    step_time_s: float = 0.0
    # Times a request lost its KV blocks to memory pressure and had to recompute.
    preemptions: int = 0
    # Draft tokens put in forward steps (engine/core/speculation.py), and of those, the ones the model chose too.
    draft_tokens: int = 0
    draft_tokens_accepted: int = 0
    # Of the draft tokens, those a structured-output grammar forced (a tool call's frame, a schema's keys).
    draft_tokens_forced: int = 0

    def add(self, other: "Counters") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def cache_reuse_fraction(self) -> float:
        """History tokens served from cache / history tokens (1.0 when there was no history)."""
        return self.history_tokens_cached / self.history_tokens if self.history_tokens else 1.0

    def as_dict(self) -> dict:
        out = asdict(self)
        out["step_time_s"] = round(self.step_time_s, 4)
        out["cache_reuse_fraction"] = round(self.cache_reuse_fraction, 4)
        return out
