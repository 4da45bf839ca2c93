"""Image-aware caching: the KV prefix cache keys image blocks by content, the encoder cache encodes a page once.

Serving engines that key prefix blocks on token ids alone hand one image's KV to another
session whose text is identical; here the image's content hash is part of every key its
placeholder tokens touch. `test_without_the_image_hash_sessions_would_share_kv` disables
that hash on purpose and shows the failure the other test guards against.
"""

import pytest
import torch

from engine import SamplingParams
from engine.core.sequence import Sequence
from tests.vlm.conftest import make_image
from tests.vlm.reference import LogitSpy
from tests.vlm.test_parity import engine_for

QUESTION = "Describe page 3 of the annual report."


def _open_with_image(engine, image, text: str = QUESTION):
    session = engine.open_session()
    session.append_message("user", text, images=[image])
    session.append_generation_prompt()
    session.prompt_ids = session.token_ids  # test bookkeeping: what was appended before generating
    session.generate(SamplingParams(max_new_tokens=2, ignore_eos=True))
    return session


def _image_blocks(session) -> list[int]:
    """Indices of the blocks that hold any of the session's image placeholder tokens."""
    bs = session.seq.block_size
    out = set()
    for start, item in session.seq.mm_items:
        out.update(range(start // bs, (start + item.length - 1) // bs + 1))
    return sorted(out)


def _three_sessions(folder):
    engine = engine_for(folder)
    spy = LogitSpy(engine)
    page_a, page_b = make_image(56, 56, 1), make_image(56, 56, 2)  # same size: identical token ids
    sessions = [_open_with_image(engine, image) for image in (page_a, page_b, page_a)]
    return engine, spy, sessions


def _needs_prefix_caching(engine) -> None:
    if not engine.block_manager.enable_prefix_caching:  # a hybrid model (Qwen3.5): a shared prefix has no state
        pytest.skip(f"{engine.adapter.name} has linear-attention layers: prefix caching is off, nothing is shared")


def test_identical_text_different_images_share_no_image_kv(vl_model):
    family, folder, _, _ = vl_model
    engine, spy, (a, b, c) = _three_sessions(folder)
    _needs_prefix_caching(engine)
    assert a.prompt_ids == b.prompt_ids == c.prompt_ids, "the test needs identical token ids"
    blocks = _image_blocks(a)
    first = blocks[0]
    assert a.seq.block_table[:first] == b.seq.block_table[:first], "the text prefix before the image should be shared"
    shared = {a.seq.block_table[i] for i in blocks} & {b.seq.block_table[i] for i in blocks}
    assert not shared, f"{family}: sessions with different images share image KV blocks {sorted(shared)}"
    first_a, first_b, first_c = (spy.rows[s.seq.seq_id][0] for s in (a, b, c))
    assert (first_a - first_b).abs().max() > 1e-3, "different images gave the same logits"
    # positive control: the same image at the same place reuses the blocks and gives the same logits
    assert [c.seq.block_table[i] for i in blocks[:-1]] == [a.seq.block_table[i] for i in blocks[:-1]]
    assert torch.allclose(first_a, first_c, atol=1e-4)  # the parity tests' tolerance (c recomputes the image's tail)
    assert c.counters.tokens_cached > b.counters.tokens_cached


def test_without_the_image_hash_sessions_would_share_kv(vl_model, monkeypatch):
    """Break the block key on purpose (token ids only): session b then gets session a's image KV."""
    family, folder, _, _ = vl_model
    monkeypatch.setattr(Sequence, "block_extra_key", lambda self, index: ())
    engine, spy, (a, b, _) = _three_sessions(folder)
    _needs_prefix_caching(engine)
    blocks = _image_blocks(a)
    shared = {a.seq.block_table[i] for i in blocks[:-1]} & {b.seq.block_table[i] for i in blocks[:-1]}
    assert shared, "without the image hash the image blocks should have been (wrongly) shared"
    first_a, first_b = spy.rows[a.seq.seq_id][0], spy.rows[b.seq.seq_id][0]
    assert torch.allclose(first_a, first_b, atol=1e-4), "b should have answered from a's image (the bug)"


def test_same_page_in_eight_sessions_is_encoded_once(vl_model):
    family, folder, _, _ = vl_model
    engine = engine_for(folder)
    page = make_image(84, 84, 5)
    sessions = []
    for i in range(8):  # the text before the page differs, so no KV prefix covers the image
        session = engine.open_session()
        session.append_message("user", f"Question {i}: what is on this page? <image>", images=[page])
        session.append_generation_prompt()
        session.submit(SamplingParams(max_new_tokens=2, ignore_eos=True))
        sessions.append(session)
    engine.run_until_idle()
    vision = engine.stats()["vision"]
    assert vision["images_encoded"] == 1 and vision["encoder_calls"] == 1, vision
    if engine.block_manager.resumable is None:  # a hybrid model's 7 later sessions wait a step for the prefix state
        assert vision["encoder_cache_hits"] == 0  # the 8 lookups of that one step shared one encoding
    late = _open_with_image(engine, page, "Question 9: and now? <image>")
    vision = engine.stats()["vision"]
    assert vision["images_encoded"] == 1 and vision["encoder_cache_hits"] >= 1, vision
    late.close()
    if engine.processor.vision.sizing.fixed:  # Gemma-3 has one image size: there is no other size to try
        return
    # the same page at another size is another input (other tokens, other features); Gemma 4's tiny budget is its
    # smallest, so it takes a larger one
    sizing = engine.processor.vision.sizing
    smaller = engine_for(folder, image_max_pixels=2 * sizing.max_pixels if sizing.rule == "gemma4" else 56 * 56)
    other = smaller.open_session()
    other.append_message("user", "<image>", images=[page])
    assert other.seq.mm_items[0][1].content_hash != sessions[0].seq.mm_items[0][1].content_hash


def test_images_of_many_sessions_are_encoded_in_one_call(vl_model):
    family, folder, _, _ = vl_model
    engine = engine_for(folder)
    for i in range(6):
        session = engine.open_session()
        session.append_message("user", "What does the chart show?", images=[make_image(56, 28 * (1 + i % 3), 40 + i)])
        session.append_generation_prompt()
        session.submit(SamplingParams(max_new_tokens=1, ignore_eos=True))
    engine.run_until_idle()
    vision = engine.stats()["vision"]
    # a hybrid model's later sessions wait one step for the shared prefix's state checkpoint: a second call
    calls = 1 if engine.block_manager.resumable is None else 2
    assert vision["images_encoded"] == 6 and vision["encoder_calls"] == calls, vision


def test_an_image_split_across_prefill_chunks_is_encoded_once(vl_model):
    family, folder, _, _ = vl_model
    engine = engine_for(folder, max_num_batched_tokens=3)  # a 9-token image spans several steps
    chunks = []
    run = engine.runner.run
    engine.runner.run = lambda step: chunks.extend((c.start, c.start + c.length) for c in step) or run(step)
    session = engine.open_session()
    session.append_message("user", "Read the table.", images=[make_image(84, 84, 9)])
    session.append_generation_prompt()
    session.generate(SamplingParams(max_new_tokens=1, ignore_eos=True))
    vision = engine.stats()["vision"]
    (start, item), = session.seq.mm_items
    if engine.adapter.shape.bidirectional_images:  # Gemma-3: its rows see each other, so it is never split
        assert (start, start + item.length) in [(max(a, start), min(b, start + item.length)) for a, b in chunks]
        assert item.length > 3 and vision["images_encoded"] == 1 and vision["encoder_cache_hits"] == 0, vision
        return
    assert sum(a < start + item.length and b > start for a, b in chunks) >= 3, chunks
    assert vision["images_encoded"] == 1 and vision["encoder_cache_hits"] >= 2, vision
