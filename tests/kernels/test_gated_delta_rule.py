"""Gated DeltaNet on the CPU (issue 49 item 3): parity with transformers' reference, and state carried across calls."""

import pytest
import torch
import torch.nn.functional as F

from kernels.gated_delta_rule import causal_conv1d, causal_conv1d_step, chunked, prepare, recurrent_step

hf = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")

KEY_HEADS, VALUE_HEADS, KEY_DIM, VALUE_DIM = 2, 4, 16, 24


def _inputs(length, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(length, KEY_HEADS, KEY_DIM, generator=generator)
    k = torch.randn(length, KEY_HEADS, KEY_DIM, generator=generator)
    v = torch.randn(length, VALUE_HEADS, VALUE_DIM, generator=generator)
    g = -F.softplus(torch.randn(length, VALUE_HEADS, generator=generator))  # log-decay <= 0, as Qwen3.5 makes it
    beta = torch.sigmoid(torch.randn(length, VALUE_HEADS, generator=generator))
    state = torch.randn(VALUE_HEADS, KEY_DIM, VALUE_DIM, generator=generator) * 0.1
    return q, k, v, g, beta, state


def _hf(q, k, v, g, beta, state):
    out, final = hf.torch_recurrent_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None],
                                                     initial_state=state[None], output_final_state=True,
                                                     use_qk_l2norm_in_kernel=True)
    return out[0], final[0]


@pytest.mark.parametrize("length", [1, 5, 64, 130])
def test_chunked_matches_the_transformers_reference(length):
    q, k, v, g, beta, state = _inputs(length)
    expected, expected_state = _hf(q, k, v, g, beta, state)
    qn, kn = prepare(q, k, VALUE_HEADS)
    out, final = chunked(qn, kn, v, g, beta, state)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(final, expected_state, atol=2e-5, rtol=1e-4)
    hf_chunked, hf_state = hf.torch_chunk_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None],
                                                           initial_state=state[None], output_final_state=True,
                                                           use_qk_l2norm_in_kernel=True)
    torch.testing.assert_close(out, hf_chunked[0], atol=2e-5, rtol=1e-4)


def test_a_prefill_split_anywhere_then_decode_equals_one_pass():
    q, k, v, g, beta, state = _inputs(150, seed=3)
    expected, expected_state = _hf(q, k, v, g, beta, state)
    qn, kn = prepare(q, k, VALUE_HEADS)
    pieces, s = [], state
    for start, end in ((0, 7), (7, 71), (71, 140)):  # chunked prefill: each call resumes from the last state
        out, s = chunked(qn[start:end], kn[start:end], v[start:end], g[start:end], beta[start:end], s, chunk=16)
        pieces.append(out)
    for t in range(140, 150):  # then decode, a token at a time, batched with another sequence
        other = torch.zeros(1, VALUE_HEADS, KEY_DIM, VALUE_DIM)
        out, both = recurrent_step(torch.stack([qn[t], qn[t]]), torch.stack([kn[t], kn[t]]),
                                   torch.stack([v[t], v[t]]), torch.stack([g[t], g[t]]),
                                   torch.stack([beta[t], beta[t]]), torch.cat([s[None], other]))
        pieces.append(out[:1])
        s = both[0]
    torch.testing.assert_close(torch.cat(pieces), expected, atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(s, expected_state, atol=5e-5, rtol=1e-4)


def test_no_state_means_zeros_and_empty_input_keeps_the_state():
    q, k, v, g, beta, state = _inputs(9, seed=5)
    qn, kn = prepare(q, k, VALUE_HEADS)
    torch.testing.assert_close(chunked(qn, kn, v, g, beta)[0], chunked(qn, kn, v, g, beta, torch.zeros_like(state))[0])
    out, same = chunked(qn[:0], kn[:0], v[:0], g[:0], beta[:0], state)
    assert out.shape == (0, VALUE_HEADS, VALUE_DIM) and torch.equal(same, state)


def test_causal_conv1d_resumes_from_its_state_and_matches_transformers():
    generator = torch.Generator().manual_seed(1)
    channels, width = 12, 4
    x = torch.randn(20, channels, generator=generator)
    weight, bias = torch.randn(channels, width, generator=generator), torch.randn(channels, generator=generator)
    whole, _ = causal_conv1d(x, weight, bias)
    expected = hf.causal_conv1d_fn(x.T[None], weight, bias, activation="silu")[0].T
    torch.testing.assert_close(whole, expected)
    first, state = causal_conv1d(x[:6], weight, bias)
    parts = [first]
    for t in range(6, 20):  # a token at a time, as decode does
        out, state = causal_conv1d(x[t:t + 1], weight, bias, state)
        parts.append(out)
    torch.testing.assert_close(torch.cat(parts), whole)
    # decode for several sequences at once: the same outputs and windows as one call each
    states = torch.randn(3, channels, width - 1, generator=generator)
    tokens = torch.randn(3, channels, generator=generator)
    batched, windows = causal_conv1d_step(tokens, weight, states)
    for i in range(3):
        one, window = causal_conv1d(tokens[i:i + 1], weight, None, states[i])
        torch.testing.assert_close(batched[i], one[0])
        assert torch.equal(windows[i], window)
