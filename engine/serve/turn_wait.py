"""When the engine holds its next step a moment for the next turns of replies that just finished.

An agent's next turn follows its reply by the time its tool takes: a BM25 search answers in milliseconds. The
engine steps again as soon as a step ends, so such a turn arrives a few milliseconds into the next step and waits
all of it before its prompt is computed (on one Zen 5 with SmolLM2: back 5-13 ms after its reply, then 55-62 ms
for the step in progress, a third of its time to first token; docs/benchmarks.md). Waiting a moment instead lets it
join that step.

`TurnWait` decides how long the engine may wait after a step that finished replies:
- **Only while turns come back that fast.** Every step that finished replies is an outcome: a request arrived
  within `window_s` of it, or none did. The engine waits while at least half of the last `history` outcomes came
  back, and keeps counting while it does not wait, so clients whose tools take longer turn the wait off after a
  few misses and quick ones turn it back on.
- **At most `share` of the time.** Waiting is paid from an allowance that fills at `share` seconds a second and
  holds at most `BURST` windows: however clients time their requests, over any T seconds the engine idles for them
  at most `share` x T + `BURST` x `window_s` (10 % and 0.1 s at the defaults).

The caller (`LocalBackend`) ends a wait early once as many requests have arrived as replies finished.
"""

from __future__ import annotations

from collections import deque

__all__ = ["TURN_WAIT_S", "TURN_WAIT_SHARE", "TurnWait"]

TURN_WAIT_S = 0.025  # longest wait after a step, from its end: agents' fast tools come back within ~15 ms
TURN_WAIT_SHARE = 0.1  # most of the time the engine spends waiting for turns
BURST = 4  # windows of waiting the allowance holds (a miss costs a whole window; the next hits stay paid for)


class TurnWait:
    """Outcomes of recent finishing steps and the waiting allowance (times in seconds, from one clock)."""

    def __init__(self, window_s: float = TURN_WAIT_S, share: float = TURN_WAIT_SHARE, history: int = 32) -> None:
        if window_s < 0:
            raise ValueError(f"the turn wait must be >= 0 seconds (got {window_s})")
        self.window_s = window_s
        self.share = share
        self.outcomes: deque[bool] = deque(maxlen=history)
        self.open_at: float | None = None  # the last finishing step no request has followed yet
        self.allowance = window_s
        self.updated_at: float | None = None

    def arrived(self, now: float) -> None:
        """A request arrived (before it waits for the step in progress)."""
        if self.open_at is not None:
            self.outcomes.append(now - self.open_at <= self.window_s)
            self.open_at = None

    def finished(self, now: float) -> float:
        """A step that finished replies ended at `now`: how long the engine may wait for their next turns."""
        if self.open_at is not None and now - self.open_at > self.window_s:
            self.outcomes.append(False)  # nothing came back in time after the one before
        self.open_at = now
        if self.updated_at is not None:
            self.allowance = min(BURST * self.window_s, self.allowance + (now - self.updated_at) * self.share)
        self.updated_at = now
        if self.window_s == 0 or 2 * sum(self.outcomes) < len(self.outcomes):
            return 0.0
        return min(self.window_s, self.allowance)

    def waited(self, seconds: float) -> None:
        """The engine waited `seconds` after the last finishing step."""
        self.allowance = max(0.0, self.allowance - seconds)
