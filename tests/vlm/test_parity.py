"""The engine equals a full recompute of the whole history in HF transformers (fp32, tiny random models).

A 3-turn session whose turns 2 and 3 append new images: every turn's greedy tokens equal
HF `generate` on the whole history (every image, positions from HF's own get_rope_index),
and every logits row the engine sampled from is within 1e-4 of HF's full forward over
the final conversation. Chunked prefill that splits images across steps, batching of
sessions and preemption with recompute must not change a token.
"""

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from tests.engine.conftest import BF16_MEAN_VS_HF, NO_BF16
from tests.vlm.conftest import make_image, save_model
from tests.vlm.reference import LogitSpy, hf_greedy, hf_inputs, hf_logits

TOLERANCE = 1e-4  # max |Δlogit| in fp32
# Qwen3.5's Gated DeltaNet continued from its state rounds unlike a full forward (see tests/engine/test_families.py)
TOLERANCES = {"qwen3_5-vl": 1e-3}  # by family name
NEW = 6  # tokens generated per turn


def engine_for(folder, **config) -> Engine:
    config.setdefault("block_size", 4)
    config.setdefault("num_kv_blocks", 512)
    return Engine.from_pretrained(str(folder), EngineConfig(**config))


def conversation(seed: int) -> list[tuple[str, str, list]]:
    """Three turns: (role, text, images); turns 2 and 3 add new images of different sizes."""
    return [
        ("user", f"Question {seed}: what was the total revenue? File: annual-report, Page: 3",
         [make_image(56, 84, seed)]),
        ("user", "Search results for: revenue 2019 <image> File: annual-report, Page: 12 <image>",
         [make_image(84, 56, seed + 100), make_image(84, 84, seed + 200)]),
        ("user", "File: annual-report, Page: 19", [make_image(28, 56, seed + 300)]),
    ]


def run_turns(engine: Engine, sessions: list, turns: list[list], new: int = NEW) -> list[list[list[int]]]:
    """Run every session's turns in lockstep (each turn: append, submit all, step until done)."""
    outputs = [[] for _ in sessions]
    for turn in range(len(turns[0])):
        requests = []
        for session, plan in zip(sessions, turns):
            role, text, images = plan[turn]
            session.append_message(role, text, images=images)
            session.append_generation_prompt()
            requests.append(session.submit(SamplingParams(max_new_tokens=new, ignore_eos=True)))
        engine.run_until_idle()
        for out, request in zip(outputs, requests):
            out.append(request.wait().output_token_ids)
    return outputs


def check_logits(spy: LogitSpy, session, model, vision, prompt_lengths: list[int]) -> float:
    """Every sampled row equals HF's full forward of the final conversation at the same position.

    Row j of a turn whose prompt has n tokens predicts token n + j, so it is HF's row n - 1 + j.
    """
    full = hf_logits(model, hf_inputs(session, vision))
    positions = [n - 1 + j for n in prompt_lengths for j in range(NEW)]
    ours = torch.stack(spy.rows[session.seq.seq_id])
    assert ours.shape[0] == len(positions), (ours.shape, len(positions))
    delta = (ours - full[positions]).abs()
    tolerance = TOLERANCES.get(session.engine.adapter.family.name, TOLERANCE)
    assert delta.max() <= tolerance, f"max |Δlogit| {delta.max():.3g}, mean {delta.mean():.3g} over {len(positions)} rows"
    return float(delta.max())


@pytest.mark.parametrize("token_budget", [2048, 5])
def test_three_turns_with_new_images_match_full_recompute(vl_model, token_budget):
    family, folder, model, _ = vl_model
    three_turns_with_images(family, folder, model, token_budget)


def test_gemma4_with_a_mixture_of_experts_matches_full_recompute_over_image_turns(tmp_path):
    """Gemma 4's 26B-A4B layer (experts beside every dense MLP) on image turns: the same three turns, tokens equal to
    HF generate and logits within 1e-4 of its full forward, every expert of the first layer given tokens."""
    model, _ = save_model(tmp_path, "gemma4", text_extra=dict(enable_moe_block=True, num_experts=4, top_k_experts=2,
                                                              moe_intermediate_size=24))
    assert model.config.text_config.enable_moe_block
    routed = set()
    engine = three_turns_with_images(
        "gemma4", tmp_path, model, 5,
        before=lambda engine: engine.adapter.layers[0].router.register_forward_hook(
            lambda module, args, out: routed.update(out[1].flatten().tolist())))
    assert all(layer.experts is not None for layer in engine.adapter.layers)
    assert routed == {0, 1, 2, 3}


def three_turns_with_images(family, folder, model, token_budget, before=None) -> Engine:
    engine = engine_for(folder, max_num_batched_tokens=token_budget)
    if before is not None:
        before(engine)
    spy = LogitSpy(engine)
    session = engine.open_session()
    vision = engine.processor.vision
    prompt_lengths = []
    for turn, (role, text, images) in enumerate(conversation(seed=1)):
        session.append_message(role, text, images=images)
        session.append_generation_prompt()
        prompt_lengths.append(session.num_tokens)
        inputs = hf_inputs(session, vision)
        reply = session.generate(SamplingParams(max_new_tokens=NEW, ignore_eos=True))
        assert reply.output_token_ids == hf_greedy(model, inputs, NEW), f"{family} turn {turn + 1} diverged"
        if turn:
            assert reply.counters.tokens_cached == reply.history_tokens - 1, "history was recomputed"
    check_logits(spy, session, model, vision, prompt_lengths)
    assert engine.stats()["vision"]["images_encoded"] == 4
    return engine


def test_batched_sessions_equal_single_sessions(vl_model):
    family, folder, _, _ = vl_model
    plans = [conversation(seed=10 * i) for i in range(4)]
    batched = engine_for(folder, max_num_batched_tokens=64)
    together = run_turns(batched, [batched.open_session() for _ in plans], plans)
    assert batched.counters.forward_steps < 4 * 3 * NEW, "sessions were not batched together"
    alone = []
    for plan in plans:
        single = engine_for(folder)
        alone += run_turns(single, [single.open_session()], [plan])
    assert together == alone, f"{family}: batching changed the tokens"


def test_preemption_and_recompute_keep_tokens_exact(vl_model):
    """A small KV pool and no encoder cache: sessions lose blocks, recompute, and re-encode their images."""
    family, folder, _, _ = vl_model
    plans = [conversation(seed=7 * i + 1) for i in range(4)]
    roomy = engine_for(folder)
    sessions = [roomy.open_session() for _ in plans]
    expected = run_turns(roomy, sessions, plans)
    # 64 blocks of 4 tokens, or 1.25 of the longest session where its images are larger (Gemma 4: 40-70 tokens each)
    blocks = max(64, -(-5 * max(s.num_tokens for s in sessions) // 16))
    tight = engine_for(folder, num_kv_blocks=blocks, max_num_batched_tokens=24, encoder_cache_gib=0.0)
    outputs = run_turns(tight, [tight.open_session() for _ in plans], plans)
    stats = tight.stats()
    assert stats["preemptions"] > 0, stats
    assert stats["vision"]["images_encoded"] > 16, "recompute should have re-encoded images (no encoder cache)"
    assert outputs == expected, f"{family}: preemption changed tokens"



@NO_BF16
def test_a_bf16_session_with_images_is_as_close_to_float32_as_hf_bf16(vl_model):
    """bf16 where the CPU has it (issue 49): three image turns, each continued from the cache (only its new
    tokens prefilled), and every sampled row is as close to HF's float32 full forward of the whole history as HF's
    own bf16 model is. HF's bf16 `generate` is not the reference: its rounding is the larger (tests/engine/test_hybrid.py)."""
    import copy

    family, folder, model, _ = vl_model
    engine = engine_for(folder, dtype="bfloat16", max_num_batched_tokens=2048)
    assert engine.adapter.dtype == torch.bfloat16
    spy = LogitSpy(engine)
    session = engine.open_session()
    prompt_lengths = []
    for turn, (role, text, images) in enumerate(conversation(seed=1)):
        session.append_message(role, text, images=images)
        session.append_generation_prompt()
        prompt_lengths.append(session.num_tokens)
        reply = session.generate(SamplingParams(max_new_tokens=NEW, ignore_eos=True))
        if turn:
            assert reply.counters.tokens_cached == reply.history_tokens - 1, "history was recomputed"
    inputs = hf_inputs(session, engine.processor.vision)
    positions = [n - 1 + j for n in prompt_lengths for j in range(NEW)]
    ours = torch.stack(spy.rows[session.seq.seq_id]).float()
    float32 = hf_logits(model, inputs)[positions]
    hf_bf16 = hf_logits(copy.deepcopy(model).to(torch.bfloat16), inputs)[positions]
    ours_error, hf_error = (ours - float32).abs().mean(), (hf_bf16 - float32).abs().mean()
    assert ours_error <= BF16_MEAN_VS_HF * hf_error, \
        f"{family}: mean |Δlogit| to float32 ours {ours_error:.4f}, HF bf16 {hf_error:.4f}"
