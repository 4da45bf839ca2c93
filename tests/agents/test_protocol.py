"""The tool-call protocol: schemas built from the tool specs, and a parser that never raises."""

import json

import pytest

from engine.agents.protocol import (AnswerCall, Malformed, SearchCall, answer_spec, parse_tool_call, search_spec,
                                    tool_call_schema)
from engine.datasets import Evidence
from tools.errors import DossierError


def test_schemas_follow_the_specs_and_put_tool_first():
    schema = tool_call_schema(True, ["b", "a"])
    search, answer = schema["anyOf"]
    assert list(search["properties"]) == ["tool", "query"]
    assert list(answer["properties"]) == ["tool", "answer", "citations"]
    assert answer["properties"]["citations"]["items"]["properties"]["document"]["enum"] == ["a", "b"]
    assert tool_call_schema(False)["properties"]["tool"] == {"const": "answer"}
    assert answer_spec(["a"]).validate({"answer": ["x"], "citations": [{"document": "a", "page": 2}]})
    with pytest.raises(DossierError):
        answer_spec(["a"]).validate({"answer": ["x"], "citations": [{"document": "zzz", "page": 2}]})
    with pytest.raises(DossierError):
        search_spec().validate({"query": ""})


def test_schema_compiles_with_xgrammar():
    import xgrammar
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel()
    raw.train_from_iterator(['{"tool": "search", "query": "x"}'] * 10,
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "</s>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="</s>")
    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(tok))
    compiler.compile_json_schema(json.dumps(tool_call_schema(True, ["report"])))


@pytest.mark.parametrize("raw, expected", [
    ('{"tool": "search", "query": " revenue 2019 "}', SearchCall("revenue 2019")),
    ('Sure! {"tool": "search", "query": "x"} trailing', SearchCall("x")),
    ('{"name": "search", "arguments": {"query": "x"}}', SearchCall("x")),
    ('{"tool": "answer", "answer": "$5", "citations": [{"document": "d", "page": "3"}, {"document": "d", "page": 0}]}',
     AnswerCall(["$5"], [Evidence("d", 3)])),
])
def test_parser_accepts_reasonable_calls(raw, expected):
    assert parse_tool_call(raw) == expected


@pytest.mark.parametrize("raw, reason", [
    ("", "empty"), ("no json here", "no JSON"), ('{"tool": "search"', "invalid JSON"),
    ('{"tool": "search", "query": ""}', "non-empty"), ('{"tool": "fly"}', "unknown tool"),
    ('{"tool": "answer", "answer": []}', "list of strings"), ("[1, 2]", "no JSON object"),
])
def test_parser_describes_what_is_wrong(raw, reason):
    result = parse_tool_call(raw)
    assert isinstance(result, Malformed) and reason in result.reason


def test_search_is_refused_on_the_forced_turn():
    assert isinstance(parse_tool_call('{"tool": "search", "query": "x"}', allow_search=False), Malformed)


def test_an_answer_cut_off_in_its_citations_keeps_the_answer_and_complete_citations():
    raw = ('{"tool": "answer", "answer": ["$1,577", "2019"], "citations": [{"document": "d", "page": 3}, '
           '{"document": "d", "page": 4}, {"document": "d", "pa')
    assert parse_tool_call(raw) == AnswerCall(["$1,577", "2019"], [Evidence("d", 3), Evidence("d", 4)], truncated=True)
    cut_in_list = raw[:raw.index(', "citations"')] + ', "20'  # the answer list itself unfinished
    assert isinstance(parse_tool_call(cut_in_list), Malformed)
    cut_in_query = '{"tool": "search", "query": "revenue 20'
    assert isinstance(parse_tool_call(cut_in_query), Malformed)
    escaped = '{"tool": "answer", "answer": ["a \\"quoted\\" ]} word"], "citations": [{"document": "d", "page": 1}, {"do'
    assert parse_tool_call(escaped) == AnswerCall(['a "quoted" ]} word'], [Evidence("d", 1)], truncated=True)


def test_raw_control_characters_inside_strings_are_accepted():
    """xgrammar's length-bounded string rule admits raw control characters; json's strict mode would not."""
    assert parse_tool_call('{"tool": "search", "query": "net\tincome"}') == SearchCall("net\tincome")
