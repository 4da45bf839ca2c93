"""Query pairs from trajectories: the runner's own prompts, the right targets, a document-disjoint split."""

import json

import pytest

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from engine.datasets import write_jsonl
from engine.datasets.formats import Evidence, Question
from engine.train.pairs import PairFilter, build_pairs, split_pairs
from engine.train.records import keep_most_trusted, load_runs
from engine.train.split import split_by_document
from tests.agents.scripted import build_corpus, questions
from tools.errors import DossierError


def _policy(seen):
    """q1: a search that misses ("outlook"), then one that finds the gold page, then an answer.
    q2: a first search that finds the gold page, then an answer. q3: one missing search, then an answer."""

    def policy(qid, turn, messages):
        seen[(qid, turn)] = list(messages)
        plan = {"q1": ["outlook", "revenue 2019"], "q2": ["spaghetti"], "q3": ["cold brew"]}[qid]
        if turn <= len(plan):
            return json.dumps({"tool": "search", "query": plan[turn - 1]})
        return json.dumps({"tool": "answer", "answer": ["$48,250" if qid == "q1" else "x"], "citations": []})

    return policy


@pytest.fixture()
def agent_run(tmp_path):
    corpus = build_corpus(tmp_path / "c")
    env = AgentEnv(corpus, page_chars=400)
    qs = questions(3)
    write_jsonl(tmp_path / "q.jsonl", [q.to_json() for q in qs])
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "questions": str(tmp_path / "q.jsonl")}))
    seen = {}
    RolloutRunner(ScriptedBackend(_policy(seen)), AgentSettings(), env, run, concurrency=2).run(qs)
    return run, env, seen


def test_pairs_carry_the_runners_exact_prompt_and_the_search_that_found_gold(agent_run):
    run, env, seen = agent_run
    records, problems = load_runs([run])
    assert problems == [] and {r.source for r in records} == {"agent"}
    pairs, skipped = build_pairs(records, AgentSettings(), env)
    by_question = {p.question_id: p for p in pairs}
    assert set(by_question) == {"q1", "q2"}  # q3's search missed its gold page
    assert skipped["no search turn found a gold page"] == 1
    q1 = by_question["q1"]
    assert (q1.step, q1.search_number, q1.query, q1.gold_rank) == (2, 2, "revenue 2019", 1)
    # the prompt is what the scripted model was given at that turn, with its first turn's output in between
    assert q1.messages == seen[("q1", 2)]
    assert [role for role, _ in q1.messages] == ["system", "user", "assistant", "user"]
    assert "Search results for: outlook" in q1.messages[-1][1] and "(9 turns left.)" in q1.messages[-1][1]
    assert json.loads(q1.target) == {"tool": "search", "query": "revenue 2019"}
    assert by_question["q2"].messages == seen[("q2", 1)] and by_question["q2"].search_number == 1


def test_filters_first_query_and_successful_episodes(agent_run):
    run, env, _ = agent_run
    records, _ = load_runs([run])
    first, _ = build_pairs(records, AgentSettings(), env, PairFilter(first_query_only=True))
    assert [p.question_id for p in first] == ["q2"]  # q1's first query missed
    good, skipped = build_pairs(records, AgentSettings(), env, PairFilter(successful_only=True))
    assert [p.question_id for p in good] == ["q1"] and skipped["episode not successful"] == 2


def test_first_query_pairs_need_no_corpus_but_later_ones_do(agent_run):
    run, _, seen = agent_run
    records, _ = load_runs([run])
    pairs, skipped = build_pairs(records, AgentSettings(), None)
    assert [p.question_id for p in pairs] == ["q2"] and pairs[0].messages == seen[("q2", 1)]
    assert skipped["later turns need the corpus (--corpus) to rebuild observations"] == 3


def test_hand_made_human_trajectories_take_precedence_and_are_replayed(agent_run, tmp_path):
    run, env, seen = agent_run
    human = tmp_path / "studio"
    human.mkdir()
    (human / "run.json").write_text(json.dumps({"agent": "human", "questions": str(tmp_path / "q.jsonl")}))
    # a person searched twice for q1 (no raw outputs, no tokens: the studio records calls and results)
    steps = [{"step": 1, "tool_call": {"name": "search", "arguments": {"query": "outlook"}},
              "tool_result": {"pages": [{"document": "report", "page": 3}]}},
             {"step": 2, "tool_call": {"name": "view_page", "arguments": {"document": "report", "page": 3}}},
             {"step": 3, "tool_call": {"name": "search", "arguments": {"query": "revenue"}},
              "tool_result": {"pages": [{"document": "report", "page": 1}]}},
             {"step": 4, "tool_call": {"name": "answer", "arguments": {"answer": ["$48,250"], "citations": []}}}]
    write_jsonl(human / "trajectories.jsonl", [{"id": "q1", "question": "What was revenue in 2019?",
                                                "annotator": "ann-1", "steps": steps}])
    records, _ = load_runs([run, human])
    kept, dropped = keep_most_trusted(records)
    assert dropped == 1 and {(r.id, r.source) for r in kept} == {("q1", "human"), ("q2", "agent"), ("q3", "agent")}
    pairs, _ = build_pairs(kept, AgentSettings(), env, PairFilter(sources=("human",), annotators=("ann-1",)))
    assert len(pairs) == 1 and pairs[0].query == "revenue" and pairs[0].source == "human"
    assert pairs[0].messages[:2] == seen[("q1", 1)]  # same system prompt and question as the agent saw
    assert pairs[0].messages[2] == ("assistant", '{"tool": "search", "query": "outlook"}')
    assert "Search results for: outlook" in pairs[0].messages[3][1]
    none, skipped = build_pairs(kept, AgentSettings(), env, PairFilter(sources=("human",), annotators=("ann-2",)))
    assert none == [] and skipped["annotator not selected"] == 1


def test_split_by_document_never_shares_a_document():
    qs = [Question(f"q{i}", f"question {i}", [["a"]], [Evidence(f"doc{i % 7}", 1)]) for i in range(40)]
    qs.append(Question("x", "cross", [["a"]], [Evidence("doc1", 1), Evidence("doc2", 4)]))
    qs.append(Question("none", "no evidence", [["a"]], []))
    split = split_by_document(qs, heldout_share=0.3, seed=3)
    assert not set(split.train_documents) & set(split.heldout_documents)
    assert {"doc1", "doc2"} <= set(split.train_documents) or {"doc1", "doc2"} <= set(split.heldout_documents)
    for q in qs[:-1]:
        side = split.train_documents if q.id in split.train_ids else split.heldout_documents
        assert {e.document for e in q.evidence} <= set(side)
    assert split.no_evidence_ids == ["none"] and split.side_of("none") is None
    assert 0.15 <= len(split.heldout_ids) / 41 <= 0.45
    assert split_by_document(qs, 0.3, seed=3).heldout_ids == split.heldout_ids  # deterministic
    with pytest.raises(DossierError, match="between 0 and 1"):
        split_by_document(qs, 1.5)


def test_pairs_split_by_their_gold_documents(agent_run):
    run, env, _ = agent_run
    pairs, _ = build_pairs(load_runs([run])[0], AgentSettings(), env)
    train, held = split_pairs(pairs, {"menu"})
    assert [p.question_id for p in held] == ["q2"] and [p.question_id for p in train] == ["q1"]


def test_retrieval_eval_scores_a_runs_first_queries(agent_run, tmp_path):
    from typer.testing import CliRunner

    from engine.cli.main import app

    run, env, _ = agent_run
    result = CliRunner().invoke(app, ["retrieval-eval", "--corpus", str(tmp_path / "c"), "--questions",
                                      str(tmp_path / "q.jsonl"), "--queries-from", str(run), "--format", "json"])
    assert result.exit_code == 0, result.output
    system = json.loads(result.stdout)["systems"][0]
    assert system["queries"] == {"q1": "outlook", "q2": "spaghetti", "q3": "cold brew"}
    assert system["per_question"] == {"q1": 0.0, "q2": 1.0, "q3": 0.0} and system["mode"] == "boolean"


def test_a_malformed_first_query_is_a_miss_not_the_end_of_the_batch(agent_run, tmp_path):
    from typer.testing import CliRunner

    from engine.cli.main import app

    run, _env, _ = agent_run
    path = run / "trajectories.jsonl"
    episodes = [json.loads(line) for line in path.read_text().splitlines()]
    for episode in episodes:
        if episode["id"] == "q2":  # q2's first query found its gold page; make it one the parser refuses
            first = next(s for s in episode["steps"] if (s.get("tool_call") or {}).get("name") == "search")
            first["tool_call"]["arguments"]["query"] = "spaghetti AND ("
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    result = CliRunner().invoke(app, ["retrieval-eval", "--corpus", str(tmp_path / "c"), "--questions",
                                      str(tmp_path / "q.jsonl"), "--queries-from", str(run), "--format", "json"])
    assert result.exit_code == 0, result.output
    system = json.loads(result.stdout)["systems"][0]
    assert system["query_errors"] == 1 and system["per_question"] == {"q1": 0.0, "q2": 0.0, "q3": 0.0}
