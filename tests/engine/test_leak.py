"""1,000 sessions opened, run and closed leave the block pool as it started."""

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import random_prompt


def test_thousand_sessions_leave_the_pool_as_it_started(tiny_llama):
    folder, _ = tiny_llama
    # a pool small enough that waves of sessions evict, preempt and share a prefix
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=120))
    bm = engine.block_manager
    shared = random_prompt(8, seed=1)
    opened = 0
    for wave in range(20):
        sessions = [engine.open_session() for _ in range(50)]
        opened += len(sessions)
        requests = []
        for i, session in enumerate(sessions):
            session.append(shared + random_prompt(1 + (wave + i) % 7, seed=wave * 100 + i))
            requests.append(engine.submit(session, SamplingParams(max_new_tokens=2 + i % 3, ignore_eos=True)))
        engine.step()
        for session in sessions[::7]:
            session.close()  # closed while its request may still be running: cancelled
        engine.run_until_idle()
        for session in sessions:
            session.close()
        assert all(r.finished for r in requests)
    assert opened == 1000
    assert bm.num_free == bm.num_blocks
    assert all(count == 0 for count in bm.ref_counts)
    assert not engine.scheduler.sequences and not engine.scheduler.active and not engine.has_pending()
    bm.check_invariants()
    assert engine.counters.tokens_cached > 0  # the shared prefix was reused along the way
