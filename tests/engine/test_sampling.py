"""Sampling, stopping and structured output, on a tiny random model."""

import json

import pytest

from engine import Engine, EngineConfig, FinishReason, SamplingParams
from tests.engine.conftest import random_prompt
from tools.errors import DossierError


@pytest.fixture(scope="module")
def engine(tiny_llama):
    folder, _ = tiny_llama
    return Engine.from_pretrained(str(folder), EngineConfig(block_size=4, num_kv_blocks=1024))


def generate(engine, prompt, sampling):
    session = engine.open_session()
    session.append(prompt)
    try:
        return session.generate(sampling)
    finally:
        session.close()


PROMPT = random_prompt(17, seed=7)


def test_seeded_sampling_is_reproducible_and_batch_independent(engine):
    params = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=16, seed=123, ignore_eos=True)
    alone = generate(engine, PROMPT, params).output_token_ids
    assert generate(engine, PROMPT, params).output_token_ids == alone
    # the same request batched with others draws the same tokens
    sessions, requests = [], []
    for i in range(4):
        s = engine.open_session()
        s.append(PROMPT if i == 2 else random_prompt(9 + i, seed=i))
        sessions.append(s)
        requests.append(engine.submit(s, params if i == 2 else SamplingParams(temperature=1.0, seed=i, max_new_tokens=16)))
    engine.run_until_idle()
    assert requests[2].output_token_ids == alone
    for s in sessions:
        s.close()
    other = generate(engine, PROMPT, SamplingParams(temperature=1.0, max_new_tokens=16, seed=124, ignore_eos=True))
    assert other.output_token_ids != alone


def test_top_k_one_is_greedy(engine):
    greedy = generate(engine, PROMPT, SamplingParams(max_new_tokens=10, ignore_eos=True)).output_token_ids
    top1 = generate(engine, PROMPT, SamplingParams(temperature=0.7, top_k=1, seed=5, max_new_tokens=10, ignore_eos=True))
    assert top1.output_token_ids == greedy


def test_stop_token_min_and_max_new_tokens(engine):
    greedy = generate(engine, PROMPT, SamplingParams(max_new_tokens=10, ignore_eos=True)).output_token_ids
    stop_at = greedy[4]
    cut = generate(engine, PROMPT, SamplingParams(max_new_tokens=10, stop_token_ids=[stop_at], ignore_eos=True))
    first = greedy.index(stop_at)
    assert cut.output_token_ids == greedy[: first + 1] and cut.finish_reason is FinishReason.stop
    forced = generate(engine, PROMPT, SamplingParams(max_new_tokens=10, min_new_tokens=3, stop_token_ids=[greedy[0]]))
    assert forced.output_token_ids[0] != greedy[0] and len(forced.output_token_ids) >= 3
    short = generate(engine, PROMPT, SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert len(short.output_token_ids) == 3 and short.finish_reason is FinishReason.length


def test_stop_string_truncates_text(engine):
    processor = engine.processor
    greedy = generate(engine, PROMPT, SamplingParams(max_new_tokens=12, ignore_eos=True)).output_token_ids
    # the text a later token adds becomes a stop string: the output must stop there and drop it
    for index in range(2, 12):
        before = processor.decode(greedy[:index])
        stop = processor.decode(greedy[: index + 1])[len(before) :]
        if stop.strip():
            break
    else:
        pytest.fail("every generated token decoded to whitespace")
    cut = generate(engine, PROMPT, SamplingParams(max_new_tokens=12, ignore_eos=True, stop=[stop]))
    assert cut.finish_reason is FinishReason.stop_string
    assert len(cut.output_token_ids) <= index + 1 and stop not in cut.text
    assert cut.output_token_ids == greedy[: len(cut.output_token_ids)]


TOOL_SCHEMA = {
    "type": "object",
    "properties": {"name": {"enum": ["search", "answer"]}, "page": {"type": "integer", "minimum": 1, "maximum": 99}},
    "required": ["name", "page"],
    "additionalProperties": False,
}


def test_json_schema_output_always_parses(engine):
    for seed in range(8):
        params = SamplingParams(temperature=1.0, seed=seed, max_new_tokens=60, json_schema=TOOL_SCHEMA)
        session = engine.open_session()
        session.append_message("user", "Call a tool.")
        session.append_generation_prompt()
        reply = session.generate(params)
        session.close()
        call = json.loads(reply.text)
        assert reply.finish_reason is FinishReason.stop, reply
        assert call["name"] in ("search", "answer") and 1 <= call["page"] <= 99 and set(call) == {"name", "page"}


def test_regex_and_ebnf_constraints(engine):
    reply = generate(engine, PROMPT, SamplingParams(temperature=1.0, seed=3, regex=r"(yes|no)[0-9]{2}", max_new_tokens=20))
    import re

    assert re.fullmatch(r"(yes|no)[0-9]{2}", reply.text), reply.text
    reply = generate(engine, PROMPT, SamplingParams(grammar='root ::= ("alpha" | "beta") "!"', max_new_tokens=20))
    assert reply.text in ("alpha!", "beta!")


def test_bad_structure_and_params_are_clear_errors(engine):
    with pytest.raises(DossierError, match="invalid regex"):
        generate(engine, PROMPT, SamplingParams(regex="(unclosed"))
    with pytest.raises(DossierError, match="at most one"):
        SamplingParams(regex="a", grammar='root ::= "a"')
    with pytest.raises(DossierError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(DossierError, match="json_schema is not valid JSON"):
        SamplingParams(json_schema="{nope")


def test_finding7_a_vanishing_temperature_is_greedy_and_fails_no_other_request(engine):
    """Issue 26 item 7 at the engine: logits / 1e-40 overflow to NaN probabilities; that row takes its greedy token
    and a sampled request batched beside it keeps the tokens it draws alone."""
    greedy = generate(engine, PROMPT, SamplingParams(max_new_tokens=10, ignore_eos=True)).output_token_ids
    honest = SamplingParams(temperature=1.0, seed=9, max_new_tokens=10, ignore_eos=True)
    alone = generate(engine, random_prompt(11, seed=4), honest).output_token_ids
    sessions = [engine.open_session(), engine.open_session()]
    sessions[0].append(PROMPT)
    sessions[1].append(random_prompt(11, seed=4))
    tiny = engine.submit(sessions[0], SamplingParams(temperature=1e-40, seed=1, max_new_tokens=10, ignore_eos=True))
    other = engine.submit(sessions[1], honest)
    engine.run_until_idle()
    assert tiny.output_token_ids == greedy and tiny.finish_reason is FinishReason.length
    assert other.output_token_ids == alone
    for s in sessions:
        s.close()
