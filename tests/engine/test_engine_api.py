"""The public API: step-based driving, threads, counters, and clear errors for bad input."""

import json
import threading

import pytest

from engine import Engine, EngineConfig, FinishReason, SamplingParams
from tests.engine.conftest import random_prompt
from tools.errors import DossierError


@pytest.fixture
def engine(tiny_llama):
    folder, _ = tiny_llama
    return Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=256))


def test_step_api_returns_finished_requests(engine):
    sessions = [engine.open_session() for _ in range(3)]
    requests = []
    for i, session in enumerate(sessions):
        session.append(random_prompt(5 + i, seed=i))
        requests.append(engine.submit(session, SamplingParams(max_new_tokens=2 + i, ignore_eos=True)))
    finished = []
    while engine.has_pending():
        finished.extend(engine.step())
    assert sorted(r.request_id for r in finished) == sorted(r.request_id for r in requests)
    assert [len(r.output_token_ids) for r in requests] == [2, 3, 4]
    total = engine.counters
    assert total.tokens_generated == 9 == sum(s.counters.tokens_generated for s in sessions)
    assert total.tokens_prefilled == sum(s.counters.tokens_prefilled for s in sessions) == 5 + 6 + 7
    assert json.dumps(engine.stats())  # serialisable for --format json


def test_threads_submit_while_the_main_loop_steps(engine):
    """Tool threads append and submit; the main thread only steps. Results equal a sequential run."""
    def episode(session, outputs):
        for turn in range(3):
            session.append(random_prompt(4 + turn, seed=1000 * session.session_id + turn))
            request = engine.submit(session, SamplingParams(max_new_tokens=3, ignore_eos=True))
            outputs.append(request.wait(timeout=60).output_token_ids)

    results: dict[int, list] = {}
    threads = []
    for _ in range(6):
        session = engine.open_session()
        results[session.session_id] = []
        threads.append(threading.Thread(target=episode, args=(session, results[session.session_id])))
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        engine.step()
    for t in threads:
        t.join()
    sequential = Engine(engine.adapter, EngineConfig(block_size=4, num_kv_blocks=256))
    for session_id, outputs in results.items():
        session = sequential.open_session()
        for turn in range(3):
            session.append(random_prompt(4 + turn, seed=1000 * session_id + turn))
            assert session.generate(SamplingParams(max_new_tokens=3, ignore_eos=True)).output_token_ids == outputs[turn]


def test_session_misuse_is_a_clear_error(engine):
    session = engine.open_session()
    with pytest.raises(DossierError, match="is empty"):
        engine.submit(session)
    session.append([5, 6, 7])
    engine.submit(session, SamplingParams(max_new_tokens=2))
    with pytest.raises(DossierError, match="is generating"):
        session.append([8])
    with pytest.raises(DossierError, match="already has a turn"):
        engine.submit(session)
    with pytest.raises(DossierError, match=r"\[100000\] are outside the vocabulary"):
        engine.open_session().append([1, 100000])
    session.close()
    with pytest.raises(DossierError, match="is closed"):
        session.append([1])


def test_close_cancels_a_running_turn_and_frees_blocks(engine):
    free = engine.block_manager.num_free
    session = engine.open_session()
    session.append(random_prompt(30, seed=5))
    request = engine.submit(session, SamplingParams(max_new_tokens=50, ignore_eos=True))
    engine.step()
    session.close()
    assert request.finish_reason is FinishReason.cancelled and not engine.has_pending()
    assert engine.block_manager.num_free == free


def test_too_long_for_the_pool_or_the_model(tiny_llama):
    folder, _ = tiny_llama
    engine = Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=4))
    session = engine.open_session()
    session.append(random_prompt(14, seed=1))
    with pytest.raises(DossierError, match="KV pool holds 16"):
        engine.submit(session, SamplingParams(max_new_tokens=8))
    with pytest.raises(DossierError, match="context"):
        engine.submit(session, SamplingParams(max_new_tokens=5000))


def test_model_paths_are_checked(tmp_path):
    with pytest.raises(DossierError, match="does not exist"):
        Engine.from_pretrained(str(tmp_path / "nowhere"))
    with pytest.raises(DossierError, match="no config.json"):
        Engine.from_pretrained(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(DossierError, match="'gpt2'"):
        Engine.from_pretrained(str(tmp_path))
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"x")
    with pytest.raises(DossierError, match="not a .gguf file"):
        Engine.from_pretrained(str(weights))


def test_config_is_checked():
    with pytest.raises(DossierError, match="block_size"):
        EngineConfig(block_size=0)
    with pytest.raises(DossierError, match="multiple of 256"):
        EngineConfig(attention_backend="flash_attn", block_size=16)
    with pytest.raises(DossierError, match="'tpu'"):
        EngineConfig(device="tpu")


def test_flash_attn_needs_cuda(tiny_llama):
    folder, _ = tiny_llama
    with pytest.raises(DossierError, match="CUDA"):
        Engine.from_pretrained(str(folder), EngineConfig(device="cpu", attention_backend="flash_attn", block_size=256))


def test_missing_bitsandbytes_names_the_install_command(tiny_llama, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_bnb(name, *args, **kwargs):
        if name == "bitsandbytes":
            raise ImportError("no bitsandbytes")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_bnb)
    folder, _ = tiny_llama
    with pytest.raises(ImportError, match=r"pip install 'dossier\[quant\]'"):
        Engine.from_pretrained(str(folder), EngineConfig(quantization="nf4", num_kv_blocks=16))


def test_fork_continues_a_conversation_from_the_prefix_cache(engine):
    """A fork generates exactly what the parent would from the same point, computing only the partial last block."""
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    parent = engine.open_session()
    parent.append_message("system", "You are a document agent.")
    parent.append_message("user", "What is the capital of France?")
    parent.append_generation_prompt()
    first = parent.generate(params)
    child = parent.fork()  # the parent's assistant turn is still open
    assert child.token_ids == parent.token_ids and child.num_cached_tokens == 0
    forked = len(child.token_ids)
    for session in (parent, child):
        session.append_message("user", "Search results: page 3 mentions revenue.")
        session.append_generation_prompt()
    from_child = child.generate(params)  # first: nothing of the new message is cached yet
    from_parent = parent.generate(params)
    assert from_child.output_token_ids == from_parent.output_token_ids and first.output_token_ids
    prompt = len(from_child.session.token_ids) - len(from_child.output_token_ids)
    assert from_child.counters.tokens_cached + from_child.counters.tokens_prefilled == prompt
    # every full block of the parent's computed prefix (all but its last sampled token) came from the cache
    assert from_child.counters.tokens_cached == (forked - 1) // 4 * 4
    child.close()
    parent.close()
    engine.block_manager.check_invariants()
