"""The engine's wait for the next turns of replies that just finished (engine/serve/turn_wait.py).

The rule on a clock the tests set, then the server's engine thread on the tiny Llama: a turn that comes back
within the window has no step run before it; with the wait off the step in progress runs without it; clients that
do not come back turn the wait off.
"""

import asyncio
import time

import pytest

from engine.serve.turn_wait import BURST, TurnWait


def test_waits_while_turns_come_back_and_stops_after_misses():
    turns = TurnWait(window_s=0.025)
    assert turns.finished(0.0) == pytest.approx(0.025)  # nothing known yet: worth a try
    turns.waited(0.01)
    turns.arrived(0.01)  # back within the window
    assert turns.finished(1.0) > 0
    turns.waited(0.025)  # nobody came: a miss, counted at the next finishing step
    assert turns.finished(2.0) > 0  # one hit, one miss: still worth it
    turns.waited(0.025)
    assert turns.finished(3.0) == 0  # one hit, two misses
    assert list(turns.outcomes) == [True, False, False]
    assert turns.finished(4.0) == 0  # 3.0's miss: one hit, three misses
    turns.arrived(4.005)  # not waiting, quick turns are still counted ...
    assert turns.finished(5.0) == 0
    turns.arrived(5.005)
    assert turns.finished(6.0) > 0  # ... and turn the wait back on (three hits, three misses)


def test_steps_finishing_close_together_wait_for_one_outcome():
    turns = TurnWait(window_s=0.025)
    turns.finished(0.0)
    turns.finished(0.01)  # the next step finished replies too, within the window of the first
    turns.arrived(0.02)
    assert list(turns.outcomes) == [True]


def test_no_window_never_waits_and_a_negative_one_is_refused():
    turns = TurnWait(window_s=0)
    assert turns.finished(0.0) == 0 and turns.finished(1.0) == 0
    with pytest.raises(ValueError, match="must be >= 0"):
        TurnWait(window_s=-0.001)


def test_a_client_timed_to_make_the_engine_wait_gets_at_most_its_share():
    """Finishing steps every 10 ms, each followed by a turn just in time and each wait run to its limit."""
    turns = TurnWait(window_s=0.025, share=0.1)
    waited, t = 0.0, 0.0
    for _ in range(1000):
        limit = turns.finished(t)
        turns.arrived(t + limit)
        turns.waited(limit)
        waited += limit
        t += 0.01 + limit
    assert waited <= 0.1 * t + BURST * 0.025 + 1e-9
    assert waited > 0.05 * t  # it does wait: the bound is the allowance, not a rule that never waits


# --- the engine thread -------------------------------------------------------------------------------------------


@pytest.fixture()
def engine(tiny_folder):
    from engine.core.config import EngineConfig
    from engine.core.llm_engine import Engine

    return Engine.from_pretrained(str(tiny_folder[0]), EngineConfig(block_size=4, dtype="float32",
                                                                     num_kv_blocks=1024, attention_backend="sdpa"))


def _turns(engine, turn_wait_s: float, rounds: int, back_after_s: float):
    """One long reply generating throughout; `rounds` short replies, each followed `back_after_s` after the client
    has it by the next. Returns (steps run between each short reply's end and the next turn's arrival, the server's
    counters before the last turn)."""
    from engine.core.sampling_params import SamplingParams
    from engine.serve.backend import LocalBackend
    from engine.serve.prompt import Prompt
    from models.base import Segment

    ended_at_step: list[int] = []
    backend = LocalBackend(engine, turn_wait_s=turn_wait_s,
                           on_finish=lambda generation, finished: ended_at_step.append(engine._step))

    def prompt(i: int) -> Prompt:
        return Prompt([Segment([5 + i, 17, 23, 42, 8, 9, 10 + i])])

    async def run() -> list[int]:
        loop = asyncio.get_running_loop()

        def submit(i: int, max_tokens: int):
            sampling = SamplingParams(max_new_tokens=max_tokens, ignore_eos=True)
            return backend.submit(prompt(i), sampling, loop)

        long = await loop.run_in_executor(None, submit, 100, 4000)
        between = []
        for i in range(rounds):
            short = await loop.run_in_executor(None, submit, i, 3)
            async for item in short.events():
                pass
            await asyncio.sleep(back_after_s)  # the client's tool
            between.append(engine._step - ended_at_step[-1])
        counters = dict(backend.counters)
        last = await loop.run_in_executor(None, submit, rounds, 1)  # the last turn
        backend.cancel(long)
        for generation in (last, long):  # both end before the loop closes
            async for item in generation.events():
                pass
        return between, counters

    backend.start()
    try:
        return asyncio.run(run())
    finally:
        backend.stop()


def test_a_turn_back_within_the_window_has_no_step_run_before_it(engine):
    between, counters = _turns(engine, turn_wait_s=1.0, rounds=3, back_after_s=0.005)
    assert between == [0, 0, 0]  # the engine held its next step for each turn
    assert counters["turn_waits"] == 2  # the third wait is still going: it ends when the last turn arrives
    assert counters["turn_wait_ms"] < 2 * 500  # each wait ended when its turn arrived, not at 1 s


def test_without_the_wait_the_step_in_progress_runs_first(engine):
    between, counters = _turns(engine, turn_wait_s=0, rounds=3, back_after_s=0.05)
    assert min(between) >= 1  # the long reply kept stepping while the client was away
    assert counters["turn_waits"] == 0


def test_clients_that_do_not_come_back_in_time_turn_the_wait_off(engine):
    started = time.perf_counter()
    between, counters = _turns(engine, turn_wait_s=0.02, rounds=4, back_after_s=0.1)
    assert counters["turn_waits"] == 1  # tried once with nothing known, then one miss turned it off
    assert counters["turn_wait_ms"] < 20 + 60  # that one wait ended with its window, not at the client's return
    assert min(between) >= 1
    assert time.perf_counter() - started < 60
