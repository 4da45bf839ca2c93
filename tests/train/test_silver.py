"""Silver trajectories: mined queries put a gold page in the top k, written as the runner writes episodes."""

import json

from typer.testing import CliRunner

from engine.agents.env import AgentEnv
from engine.agents.settings import AgentSettings
from engine.cli.main import app
from engine.datasets import write_jsonl
from engine.train.pairs import PairFilter, build_pairs
from engine.train.records import load_runs
from engine.train.silver import MineConfig, mine_question
from tests.agents.scripted import build_corpus, questions


def test_mined_queries_find_a_gold_page_and_never_use_the_answer(tmp_path):
    env = AgentEnv(build_corpus(tmp_path / "c"))
    q1 = questions(1)[0]  # "What was revenue in 2019?" -> report p.1 "Revenue in 2019 was $48,250 thousand."
    mined, tried = mine_question(env, q1, AgentSettings(k=1), MineConfig(max_queries=10))
    assert mined and tried >= len(mined)
    for query in mined:
        hits, _ = env.search(query.query, 1)
        assert (hits[0].document, hits[0].page) == ("report", 1) and query.gold_rank == 1
        assert "48250" not in query.query and "48,250" not in query.query
    assert mined[0].page_terms == 0  # question words first


def test_mine_writes_a_resumable_silver_run_that_trains_pairs(tmp_path):
    corpus = build_corpus(tmp_path / "c")
    write_jsonl(tmp_path / "q.jsonl", [q.to_json() for q in questions(3)])
    args = ["trajectories", "mine", "--corpus", str(corpus), "--questions", str(tmp_path / "q.jsonl"),
            "--out", str(tmp_path / "silver"), "-k", "1", "--format", "json"]
    first = json.loads(CliRunner().invoke(app, args).stdout)
    assert first["mined"] == 3 and first["already_done"] == 0
    again = json.loads(CliRunner().invoke(app, args).stdout)
    assert again["already_done"] == 3 and again["mined"] == 0  # resumed: nothing mined twice
    lines = [json.loads(line) for line in (tmp_path / "silver" / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and all(t["source"] == "silver" for t in lines)
    steps = lines[0]["steps"]
    assert [s["tool_call"]["name"] for s in steps] == ["search", "answer"]
    assert steps[0]["input_delta"].startswith("<system> You answer questions about a collection of PDF documents")
    records, _ = load_runs([tmp_path / "silver"])
    pairs, _ = build_pairs(records, AgentSettings(k=1), None, PairFilter(silver_variants=2))
    assert {p.source for p in pairs} == {"silver"} and len(pairs) >= 3
    assert all(p.search_number == 1 and p.gold_rank == 1 for p in pairs)


def test_dossier_eval_labels_a_silver_run(tmp_path):
    corpus = build_corpus(tmp_path / "c")
    write_jsonl(tmp_path / "q.jsonl", [q.to_json() for q in questions(2)])
    CliRunner().invoke(app, ["trajectories", "mine", "--corpus", str(corpus), "--questions", str(tmp_path / "q.jsonl"),
                             "--out", str(tmp_path / "silver"), "--format", "json"])
    result = CliRunner().invoke(app, ["eval", str(tmp_path / "silver"), "--no-drift"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("silver trajectories (mined queries with the gold answer")
    report = json.loads((tmp_path / "silver" / "eval" / "report.json").read_text())
    assert report["source"] == "silver"
