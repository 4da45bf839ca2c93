"""The Hugging Face peers of the engine benchmark: three ways a skeptic would run the same sessions.

Every peer replays the same plan (per session, per turn: messages, generation prompt or raw
token ids) into its own token histories, rendered segment by segment exactly as the engine
renders them, and generates the same fixed number of tokens greedily:

- `NaiveLoop` (a): `generate` at batch 1 on each session's whole history, nothing kept between
  turns (a stateless client of a serving engine without a prefix cache).
- `KvCacheLoop` (b): `generate` at batch 1, each session's `DynamicCache` kept between turns,
  so a turn computes only its new tokens (the best a single-session HF user does).
- `PaddedLoop` (c): `generate` on `batch` sessions at once, left-padded with an attention mask,
  nothing kept between turns (batched, but recomputing every history).

Each runs sessions (or batches) one after another, so its time is linear in sessions: the
benchmark runs a subset and scales.
"""

from __future__ import annotations

import time

import torch

__all__ = ["KvCacheLoop", "NaiveLoop", "PaddedLoop"]


class _Histories:
    """Token histories of the measured sessions, grown by the plan's ops and the generated tokens."""

    def __init__(self, engine, workload, plan, sessions: int) -> None:
        self.workload, self.plan = workload, plan[:sessions]
        self.processor = engine.processor
        self.stops = sorted(engine.stop_token_ids) or None
        self.histories: list[list[int]] = [[] for _ in self.plan]
        self.turn_starts: list[int | None] = [None for _ in self.plan]
        self.outputs: list[list[list[int]]] = [[] for _ in self.plan]
        self.tokens_prefilled = 0  # tokens run through the model (history recomputed included)

    def extend(self, i: int, turn: int) -> list[int]:
        """Append session i's ops for `turn` (closing its open assistant turn first); return the history."""
        history = self.histories[i]
        for op in self.plan[i][turn]:
            if op[0] in ("message", "prompt") and self.turn_starts[i] is not None:
                history += self.processor.close_turn(history[self.turn_starts[i]:]).token_ids
                self.turn_starts[i] = None
            if op[0] == "message":
                history += self.processor.render_message(op[1], op[2], first=not history).token_ids
            elif op[0] == "prompt":
                history += self.processor.generation_prompt().token_ids
                self.turn_starts[i] = len(history)
            else:
                history += op[1]
        return history

    def record(self, i: int, generated: list[int]) -> None:
        self.outputs[i].append(generated)
        self.histories[i] += generated

    def generate_kwargs(self) -> dict:
        n = self.workload.new_tokens
        return dict(do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=self.stops, pad_token_id=0)


class NaiveLoop(_Histories):
    """(a) HF `generate`, batch 1, the whole history each turn."""

    label = "hf naive (generate, batch 1, no cache)"

    def __init__(self, hf_model, engine, workload, plan, sessions: int) -> None:
        super().__init__(engine, workload, plan, sessions)
        self.hf_model = hf_model
        self.device = next(hf_model.parameters()).device

    def run_turn(self, turn: int) -> float:
        started = time.perf_counter()
        for i in range(len(self.plan)):
            history = self.extend(i, turn)
            ids = torch.tensor([history], device=self.device)
            self.tokens_prefilled += len(history)
            with torch.inference_mode():
                out = self.hf_model.generate(ids, attention_mask=torch.ones_like(ids), **self.generate_kwargs())
            self.record(i, out[0, len(history):].tolist())
        return time.perf_counter() - started


class KvCacheLoop(NaiveLoop):
    """(b) HF `generate`, batch 1, each session's cache kept between turns."""

    label = "hf kv-cache (generate, batch 1, cache kept per session)"

    def __init__(self, hf_model, engine, workload, plan, sessions: int) -> None:
        super().__init__(hf_model, engine, workload, plan, sessions)
        self.caches: list = [None for _ in self.plan]

    def run_turn(self, turn: int) -> float:
        started = time.perf_counter()
        for i in range(len(self.plan)):
            history = self.extend(i, turn)
            cached = self.caches[i].get_seq_length() if self.caches[i] is not None else 0
            ids = torch.tensor([history], device=self.device)
            self.tokens_prefilled += len(history) - cached
            with torch.inference_mode():
                out = self.hf_model.generate(ids, attention_mask=torch.ones_like(ids), cache=self.caches[i],
                                             return_dict_in_generate=True, **self.generate_kwargs())
            self.caches[i] = out.cache  # prompt + generated tokens but the last, as the engine keeps them
            self.record(i, out.sequences[0, len(history):].tolist())
        return time.perf_counter() - started


class PaddedLoop(NaiveLoop):
    """(c) HF `generate` on `batch` sessions at once, left-padded, the whole histories each turn."""

    label = "hf padded (generate, batched, left-padded, no cache)"

    def __init__(self, hf_model, engine, workload, plan, sessions: int, batch: int) -> None:
        super().__init__(hf_model, engine, workload, plan, sessions)
        self.batch = batch

    def run_turn(self, turn: int) -> float:
        started = time.perf_counter()
        for first in range(0, len(self.plan), self.batch):
            rows = list(range(first, min(first + self.batch, len(self.plan))))
            histories = [self.extend(i, turn) for i in rows]
            width = max(len(h) for h in histories)
            ids = torch.zeros((len(rows), width), dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, history in enumerate(histories):
                ids[r, width - len(history):] = torch.tensor(history)
                mask[r, width - len(history):] = 1
            self.tokens_prefilled += len(rows) * width  # padding is computed too
            with torch.inference_mode():
                out = self.hf_model.generate(ids.to(self.device), attention_mask=mask.to(self.device),
                                             **self.generate_kwargs())
            for r, i in enumerate(rows):
                self.record(i, out[r, width:].tolist())
        return time.perf_counter() - started
