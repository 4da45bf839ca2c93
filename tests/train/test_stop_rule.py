"""The learned stop rule: exported models equal scikit-learn's, labels from gold pages, and it fires in a run."""

import json

import numpy as np
import pytest

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.agents.stop_features import FEATURES, episode_examples, step_features
from engine.agents.stop_rule import StopRule, choose_threshold, fit_stop_rule
from tests.agents.scripted import build_corpus, questions
from tools.errors import DossierError

sklearn = pytest.importorskip("sklearn", reason="scikit-learn fits the stop rule")


def _search(query, pages):
    return {"tool_call": {"name": "search", "arguments": {"query": query}},
            "tool_result": {"pages": [{"document": d, "page": p} for d, p in pages]}}


def test_features_and_labels_of_a_recorded_episode():
    steps = [_search("revenue 2019", [("a", 1), ("a", 2)]),
             _search("revenue", [("a", 2), ("b", 5)]),  # finds the gold page b/5
             _search("revenue", [("a", 2), ("b", 5)])]  # the same query again: nothing new
    rows = episode_examples(steps, "What was revenue in 2019?", {("b", 5)}, max_iterations=10)
    assert [label for _, label in rows] == [0, 1, 1]  # only after the first search did searching on help
    last = dict(zip(FEATURES, rows[-1][0]))
    assert last["searches"] == 3 and last["turns_left"] == 7 and last["pages_seen"] == 3
    assert last["new_pages"] == 0 and last["repeated_query"] == 1 and last["searches_since_new_page"] == 1
    assert last["query_overlap"] == 1.0 and last["question_overlap"] == 1.0
    assert step_features([{"tool_call": {"name": "answer", "arguments": {}}}], "q", 10) is None


def test_exported_classifiers_equal_scikit_learn():
    from sklearn.ensemble import GradientBoostingClassifier

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, len(FEATURES)))
    y = (x[:, 0] + 0.5 * x[:, 3] + rng.normal(scale=0.5, size=300) > 0).astype(int)
    gb = fit_stop_rule(x, y, "gb", seed=1)
    reference = GradientBoostingClassifier(n_estimators=100, max_depth=2, learning_rate=0.1, subsample=0.8,
                                           random_state=1).fit(x, y)
    assert np.abs(gb.probability(x) - reference.predict_proba(x)[:, 1]).max() < 1e-9
    logistic = fit_stop_rule(x, y, "logistic")
    assert ((logistic.probability(x) > 0.5) == y).mean() > 0.8
    with pytest.raises(DossierError, match="same label"):
        fit_stop_rule(x, np.ones(300, dtype=int))


def test_threshold_keeps_the_lost_share_within_the_limit():
    p = np.array([0.9, 0.8, 0.7, 0.6, 0.3, 0.2])
    y = np.array([1, 0, 1, 0, 1, 0])
    t = choose_threshold(p, y, max_lost=0.34)  # one of three helpful continuations may be cut
    assert 0.6 < t <= 0.8 and ((p >= t) & (y == 0)).sum() == 1


def _always_stop_rule(path):
    """A logistic rule whose probability is high once a query repeats (a hand-made rule, no fitting)."""
    coef = [0.0] * len(FEATURES)
    coef[FEATURES.index("repeated_query")] = 10.0
    rule = StopRule("logistic", FEATURES, 0.5, {"mean": [0.0] * len(FEATURES), "scale": [1.0] * len(FEATURES),
                                                "coef": coef, "intercept": -5.0})
    rule.save(path)
    return StopRule.load(path)


def test_the_stop_rule_forces_the_answer_in_a_scripted_run(tmp_path):
    rule_path = tmp_path / "stop.json"
    _always_stop_rule(rule_path)
    env = AgentEnv(build_corpus(tmp_path / "c"), page_chars=400)

    def same_query_until_forced(qid, turn, messages):  # searches "revenue" on every turn it may
        if "answer now" in messages[-1][1]:  # as the structured schema would force it to
            return json.dumps({"tool": "answer", "answer": ["$48,250"], "citations": []})
        return json.dumps({"tool": "search", "query": "revenue"})

    backend = ScriptedBackend(same_query_until_forced)
    settings = AgentSettings(max_iterations=10, stop_rule=str(rule_path))
    RolloutRunner(backend, settings, env, tmp_path / "run", concurrency=1).run(questions(1))
    trajectory = json.loads((tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()[0])
    verdicts = [s.get("stop_rule") for s in trajectory["steps"]]
    assert verdicts[0] == {"probability": pytest.approx(0.0067, abs=1e-3), "fired": False}
    assert verdicts[1]["fired"] is True  # the second search repeated the first query
    # the turn after the rule fired admitted only the answer tool, and said why
    assert [turn.allow_search for _, turn in backend.submitted] == [True, True, False]
    assert "More searching is unlikely" in trajectory["steps"][2]["input_delta"]
    assert len(trajectory["steps"]) == 3  # instead of 10 turns of the same search


def test_a_bad_stop_rule_file_is_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"format": "other"}')
    with pytest.raises(DossierError, match="not a stop rule"):
        StopRule.load(tmp_path / "x.json")
    with pytest.raises(DossierError, match="does not exist"):
        StopRule.load(tmp_path / "missing.json")
