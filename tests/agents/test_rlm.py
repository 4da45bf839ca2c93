"""The RLM baseline: code in the sandbox over the marked corpus, llm_query sub-calls accounted apart, failures observed."""

import json

import pytest

import tools.sandbox
from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.rlm import NO_SUBCALLS, corpus_text
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from tests.agents.scripted import build_corpus, questions
from tools.errors import DossierError
from tests.kernel_sandbox import needs_kernel_sandbox

pytestmark = needs_kernel_sandbox

FIND = ('i = context.find("Revenue")\n'
        'page = context[context.rfind("[PAGE", 0, i):context.find("[END PAGE", i)]\n'
        'print("sub:", llm_query("What was revenue? " + page))')


def policy(qid, turn, messages):
    if "/sub" in qid:  # a sub-call: it reads the page it is given
        assert messages[-1][1].startswith("What was revenue? [PAGE 1]")
        return json.dumps({"answer": "$48,250 thousand"})
    if turn == 1:
        return json.dumps({"code": FIND})
    if turn == 2:
        return json.dumps({"code": "print('partial')\nprint(1/0)"})
    if turn == 3:
        return json.dumps({"final": "$48,250 thousand (report, page 1)"})
    return json.dumps({"tool": "answer", "answer": ["$48,250"], "citations": [{"document": "report", "page": 1}]})


@pytest.fixture()
def spy(monkeypatch):
    calls = []
    real = tools.sandbox.run_python

    def run_python(code, **kw):
        calls.append(kw["inputs"]["_code"])
        return real(code, **kw)

    monkeypatch.setattr(tools.sandbox, "run_python", run_python)
    return calls


def run(tmp_path, **settings):
    env = AgentEnv(build_corpus(tmp_path / "c"))
    out = tmp_path / "run"
    summary = RolloutRunner(ScriptedBackend(policy), AgentSettings(agent="rlm", **settings), env, out).run(questions(1))
    return summary, json.loads((out / "trajectories.jsonl").read_text().splitlines()[0]), \
        json.loads((out / "predictions.jsonl").read_text().splitlines()[0])


def test_code_runs_in_the_sandbox_sub_calls_are_accounted_apart_and_citations_parsed(tmp_path, spy):
    summary, traj, pred = run(tmp_path)
    assert summary.reasons == {"answered": 1}
    assert spy == [FIND, FIND, "print('partial')\nprint(1/0)"]  # the first program replayed once its sub-call answered
    steps = traj["steps"]
    assert [r["pending"] for r in steps[0]["tool_result"]["runs"]] == [1, 0]
    assert "sub: $48,250 thousand" in steps[1]["input_delta"]
    assert steps[1]["tool_result"]["ok"] is False and "ZeroDivisionError" in steps[1]["tool_result"]["error"]
    assert "Your code failed" in steps[2]["input_delta"] and "partial" in steps[2]["input_delta"]
    rlm = traj["rlm"]
    assert len(rlm["sub_calls"]) == 1 and rlm["sub_calls"][0]["answer"] == "$48,250 thousand"
    assert rlm["sub_tokens"] == sum(v for k, v in rlm["sub_calls"][0]["tokens"].items() if k != "appended") > 0
    assert rlm["root_tokens"] == sum(s["tokens"]["prefilled"] + s["tokens"]["generated"] for s in steps)
    assert pred["answer"] == ["$48,250"] and pred["citations"] == [{"document": "report", "page": 1}]


def test_sub_call_tokens_count_in_the_token_effort_measures(tmp_path, spy):
    from engine.datasets.formats import Prediction
    from engine.eval.analyses.effort import measures_of
    from engine.eval.trajectories import parse_episode

    _, traj, pred = run(tmp_path)
    sub = traj["rlm"]["sub_calls"][0]["tokens"]
    kinds = ("prefilled", "cached", "generated")
    assert traj["child_tokens"] == {k: sub.get(k, 0) for k in kinds} and sub["generated"] > 0
    assert pred["tokens"]["prefilled"] + pred["tokens"]["cached"] + pred["tokens"]["generated"] == \
        traj["rlm"]["root_tokens"]  # the prediction's "tokens" are the root's alone
    measured = measures_of(pred["iterations"], Prediction.from_json(pred, "p"), parse_episode(traj, "t"))
    # MADQA's token effort of an RLM is every call's: the root's and its sub-calls'
    assert measured["total_tokens"] == traj["rlm"]["root_tokens"] + traj["rlm"]["sub_tokens"]
    assert measured["generated_tokens"] == pred["tokens"]["generated"] + sub["generated"]


def test_without_sub_calls_llm_query_says_so(tmp_path, spy):
    _, traj, _ = run(tmp_path, rlm_max_depth=0)
    assert traj["rlm"]["sub_calls"] == [] and f"sub: {NO_SUBCALLS}" in traj["steps"][1]["input_delta"]
    assert traj["child_tokens"] == {"prefilled": 0, "cached": 0, "generated": 0}


def test_the_corpus_has_the_papers_file_and_page_markers(tmp_path):
    text = corpus_text(AgentEnv(build_corpus(tmp_path / "c")).store)
    assert "[FILE report]\n[PAGE 1]\nRevenue in 2019 was $48,250 thousand.\n[END PAGE 1]\n[PAGE 2]" in text


def test_bad_budgets_are_refused():
    with pytest.raises(DossierError, match="rlm-max-depth must be 0 or 1"):
        AgentSettings(agent="rlm", rlm_max_depth=2)
    with pytest.raises(DossierError, match="rlm-max-tokens"):
        AgentSettings(agent="rlm", rlm_max_tokens=10)
