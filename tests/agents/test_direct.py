"""The direct-prompting baselines (`--agent direct --inputs visual|ocr|both`): one turn over the document's
pages, Q-Guide's answer schema, and the same scoring by `dossier eval`."""

import json

import pytest

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets import load_predictions
from engine.datasets.formats import Evidence, Question, write_jsonl
from tests.agents.test_qguide import make_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("direct"))


QUESTIONS = [Question("q1", "What was revenue in 2019?", [["$48,250 thousand"], ["$48,250"]], [Evidence("memo", 1)],
                      {"document": "memo"}),
             Question("q2", "What was capital expenditure?", [["$2,740"]], [Evidence("memo", 2)], {"document": "memo"})]


def reader(qid, turn, messages):
    """Answers from what it is shown: the memo's figure when the text is there, else Unknown."""
    shown = messages[-1][1]
    if "Capital expenditure was $2,740" in shown and qid == "q2":
        return json.dumps({"tool": "submit", "answer": ["$2,740"], "citations": [{"document": "memo", "page": 2}],
                           "reasoning": "page 2 states it", "confidence": "high"})
    if "Revenue in 2019 was $48,250" in shown and qid == "q1":
        return json.dumps({"tool": "submit", "answer": ["$48,250"], "citations": [{"document": "memo", "page": 1}],
                           "reasoning": "page 1 states it", "confidence": "med"})
    return json.dumps({"tool": "submit", "answer": ["Unknown"], "citations": [], "reasoning": "nothing to read",
                       "confidence": "low"})


def run(tmp_path, corpus, inputs, policy=reader):
    settings = AgentSettings(agent="direct", observe="text", inputs=inputs)
    backend = ScriptedBackend(policy)
    out = tmp_path / inputs
    RolloutRunner(backend, settings, AgentEnv(corpus), out, concurrency=2).run(QUESTIONS)
    write_jsonl(out / "questions.jsonl", QUESTIONS)
    (out / "run.json").write_text(json.dumps({"agent": "direct", "questions": "questions.jsonl",
                                              "settings": settings.to_json()}))
    preds, errors = load_predictions(out / "predictions.jsonl")
    assert errors == []
    trajs = {t["id"]: t for t in map(json.loads, (out / "trajectories.jsonl").read_text().splitlines())}
    return out, {p.id: p for p in preds}, trajs, backend


@pytest.mark.parametrize("inputs", ["ocr", "both", "visual"])
def test_one_turn_over_every_page_in_the_answer_schema(tmp_path, corpus, inputs):
    _, preds, trajs, backend = run(tmp_path, corpus, inputs)
    assert len(backend.submitted) == 2  # one turn per question, nothing else
    turn = next(t for qid, t in backend.submitted if qid == "q1")
    shown = turn.messages[-1][1]
    assert "File: memo, Page: 1" in shown and "File: memo, Page: 2" in shown and "Question: What was revenue" in shown
    assert ("Revenue in 2019 was $48,250" in shown) == (inputs != "visual")
    assert ("not shown: this model reads text only" in shown) == (inputs != "ocr")
    assert {"answer", "citations", "reasoning", "confidence"} <= set(turn.schema["required"])
    assert "perceive" not in json.dumps(turn.schema)  # no tools
    t = trajs["q2"]
    assert [s["role"] for s in t["steps"]] == ["direct"] and t["direct"]["inputs"] == inputs
    assert t["direct"]["images_shown"] is False and len(t["direct"]["pages"]) == 2
    if inputs == "visual":  # a text model sees no page: it can only abstain
        assert preds["q1"].answer == ["Unknown"] and preds["q2"].answer == ["Unknown"]
    else:
        assert preds["q2"].answer == ["$2,740"] and preds["q2"].extra["confidence"] == "high"
        assert t["direct"]["reasoning"] == "page 2 states it" and preds["q2"].citations == [Evidence("memo", 2)]


def test_direct_runs_are_scored_by_dossier_eval(tmp_path, corpus):
    from typer.testing import CliRunner

    from engine.cli.main import app

    scores = {}
    for inputs in ("ocr", "visual"):
        out, _, _, _ = run(tmp_path, corpus, inputs)
        result = CliRunner().invoke(app, ["eval", str(out), "--no-drift", "--format", "json"])
        assert result.exit_code == 0, result.output
        scores[inputs] = json.loads(result.output)["accuracy"]
    assert scores == {"ocr": 1.0, "visual": 0.0}


def test_a_malformed_reply_ends_the_question_unanswered(tmp_path, corpus):
    _, preds, trajs, _ = run(tmp_path, corpus, "ocr", policy=lambda qid, turn, messages: "I think $48,250")
    assert preds["q1"].answer == ["Unknown"] and preds["q1"].extra["finish"] == "malformed"
    assert "no JSON object" in trajs["q1"]["steps"][0]["tool_result"]["error"]


def test_unknown_inputs_are_refused_with_the_choices():
    from tools.errors import DossierError

    with pytest.raises(DossierError, match="--inputs must be one of visual, ocr, both"):
        AgentSettings(agent="direct", inputs="pixels")
