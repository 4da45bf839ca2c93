"""Structured JSON output always parses with strict `json.loads`, length-bounded strings included."""

import json

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.core.structured import json_schema_grammar

SCHEMA = {"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 12},
                                           "tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
                                                    "maxItems": 3}},
          "required": ["query", "tags"], "additionalProperties": False}


def test_bounded_strings_exclude_raw_control_characters(tokenizer):
    import xgrammar

    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=448)
    compiled = xgrammar.GrammarCompiler(info).compile_grammar(json_schema_grammar(SCHEMA))
    assert not xgrammar.GrammarMatcher(compiled).accept_string('{"query": "a\x01')
    assert xgrammar.GrammarMatcher(compiled).accept_string('{"query": "a\\tb", "tags": ["x"]}') is False  # no escapes
    assert xgrammar.GrammarMatcher(compiled).accept_string('{"query": "ab", "tags": ["x"]}')


@pytest.mark.parametrize("seed", range(3))
def test_sampled_structured_output_is_strict_json(tiny_llama, seed):
    engine = Engine.from_pretrained(str(tiny_llama[0]), EngineConfig(block_size=4, num_kv_blocks=512))
    requests = []
    for i in range(8):
        session = engine.open_session()
        session.append([5 + i, 17, 33, 90 + seed])
        requests.append(engine.submit(session, SamplingParams(temperature=1.5, seed=seed * 100 + i, max_new_tokens=80,
                                                              json_schema=SCHEMA)))
    engine.run_until_idle()
    for request in requests:
        if request.finish_reason.value == "stop":
            value = json.loads(request.text)  # strict: a raw control character would raise
            assert 1 <= len(value["query"]) <= 12 and len(value["tags"]) <= 3
