"""`dossier eval compare BASE TUNED`: first-query hit and gold pages within the budget, paired, with intervals."""

import json

from typer.testing import CliRunner

from engine.cli.main import app

runner = CliRunner()


def _run(tmp_path, name, gold, first_hits, second_hits):
    """A run whose episode i searches twice: the first query finds the gold page when i in first_hits, the
    second when i in second_hits."""
    run = tmp_path / name
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"agent": "bm25", "model": "default", "questions": str(gold)}))
    lines, preds = [], []
    for i in range(12):
        gold_page, miss = {"document": "d", "page": i + 1}, {"document": "other", "page": 1}
        steps = [{"step": n + 1, "tool_call": {"name": "search", "arguments": {"query": f"q{n}"}},
                  "tool_result": {"pages": [gold_page if i in hits else miss]}}
                 for n, hits in enumerate((first_hits, second_hits))]
        lines.append(json.dumps({"id": f"q{i}", "question": f"Q{i}?", "steps": steps, "final": {"answer": ["x"]}}))
        preds.append(json.dumps({"id": f"q{i}", "question": f"Q{i}?", "answer": "x", "citations": []}))
    (run / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    (run / "predictions.jsonl").write_text("\n".join(preds) + "\n")
    return run


def test_compare_reports_first_query_and_budget_hits_with_mcnemar(tmp_path):
    gold = tmp_path / "q.jsonl"
    gold.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q{i}?", "answer_variants": [["y"]],
                                        "evidence": [{"document": "d", "page": i + 1}]}) + "\n" for i in range(12)))
    base = _run(tmp_path, "base", gold, first_hits={0}, second_hits={1, 2})
    tuned = _run(tmp_path, "tuned", gold, first_hits={0, 3, 4, 5, 6, 7, 8, 9}, second_hits=set())
    result = runner.invoke(app, ["eval", "compare", str(base), str(tuned), "--format", "json"])
    assert result.exit_code == 0, result.output
    searches = json.loads(result.stdout)["searches"]
    first = searches["first_hit"]
    assert (first["a"]["hits"], first["b"]["hits"], first["only_a"], first["only_b"]) == (1, 8, 0, 7)
    assert first["mcnemar_p"] == 2 * 0.5 ** 7  # exact two-sided binomial on 7 discordant pairs
    assert 0.0 < first["a"]["ci"][0] < first["a"]["rate"] < first["a"]["ci"][1]
    within = searches["hit_within_budget"]
    assert (within["a"]["hits"], within["b"]["hits"]) == (3, 8)
    one = json.loads(runner.invoke(app, ["eval", "compare", str(base), str(tuned), "--search-budget", "1",
                                         "--format", "json"]).stdout)["searches"]["hit_within_budget"]
    assert (one["a"]["hits"], one["b"]["hits"]) == (1, 8)  # the base run's second searches are past the budget
    human = runner.invoke(app, ["eval", "compare", str(base), str(tuned)])
    assert "first-query page hit: A 8.3%" in human.stdout and "only B 7" in human.stdout
