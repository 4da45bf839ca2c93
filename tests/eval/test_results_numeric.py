"""FinanceBench's tables headline numeric accuracy, with ANLS* >= 0.5 beside it (issue 50, "What to build" 2).

A table whose verdict is "numeric" counts right answers on the questions whose gold answer is a number,
tests rows against each other on those questions only, and shows ANLS* over every question beside it with
how the two disagree.
"""

from __future__ import annotations

import json

import pytest

from tests.scripts import load_script

results = load_script("results")

QUESTIONS = [
    {"id": "q1", "question": "Net income (in USD millions)?", "answer_variants": [["$11588.00"]], "evidence": []},
    {"id": "q2", "question": "Capex as a % of revenue?", "answer_variants": [["1.9%"]], "evidence": []},
    {"id": "q3", "question": "Who audits the company?", "answer_variants": [["Harwell & Stone"]], "evidence": []},
]


@pytest.fixture
def numeric_table(tmp_path, monkeypatch):
    table = results.Table("numbers", "A numeric table", "financebench", "a",
                          (results.Row("a", "a-run", "system A", ("--agent", "bm25"), model="default"),
                           results.Row("b", "b-run", "system B", ("--agent", "rag"), model="default")),
                          verdict="numeric", claims=(results.Claim("A beats B", "a", "b"),))
    monkeypatch.setitem(results.TABLES, "numbers", table)
    monkeypatch.setattr(results, "model_record", lambda m: {"name": m, "sha256": "0" * 64, "source": "test"})
    root = tmp_path / "runs"
    questions = root / "financebench" / "questions.jsonl"
    questions.parent.mkdir(parents=True)
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    for row_id, answers in (("a-run", ["11,588", "11.5%", "Harwell & Stone"]), ("b-run", ["1.1", "1.3%", "nobody"])):
        run = root / "runs" / f"financebench-{row_id}"
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"agent": "bm25", "model": "default", "questions": str(questions)}))
        (run / "predictions.jsonl").write_text("".join(json.dumps(
            {"id": q["id"], "question": q["question"], "answer": [a], "citations": [], "iterations": 1}) + "\n"
            for q, a in zip(QUESTIONS, answers)))
    return table, root, tmp_path / "docs"


def test_financebench_is_scored_as_numbers():
    assert results.TABLES["madqa-financebench"].verdict == "numeric"


def test_a_numeric_table_headlines_numbers_with_anls_beside(numeric_table):
    table, root, docs = numeric_table
    result = results.score_table(table, root, docs / "runs")
    a, b = (row["figures"] for row in result["rows"])
    assert (a["correct"], a["n"]) == (1, 2)  # "11,588" is right; "11.5%" is not 1.9 %; q3 has no number for gold
    assert (a["anls"]["correct"], a["anls"]["n"]) == (2, 3)  # ANLS* >= 0.5 takes "11.5%" and the auditor, not 11,588
    assert a["anls_on_numeric"] == {"accepted": 1, "accepted_wrong_number": 1, "rejected_right_number": 1}
    assert (b["correct"], b["n"]) == (0, 2)
    assert result["rows"][1]["vs_reference"]["n_paired"] == 2  # paired on the numeric questions only
    assert result["claims"][0]["discordant"] == [1, 0]

    results.write_table(result, docs)
    markdown = (docs / "numbers.md").read_text()
    assert "| numeric accuracy (±1 %) [95 % Wilson] | ANLS* ≥ 0.5, every question [95 % Wilson] |" in markdown
    line = next(x for x in markdown.splitlines() if x.startswith("| system A |"))
    assert line.startswith("| system A | 1/2 = 50.0 % [") and "] | 2/3 = 66.7 % [" in line
    assert ("system A: of the 2 numeric questions, ANLS* ≥ 0.5 accepted 1, 1 of them wrong numbers, "
            "and rejected 1 right number") in markdown
    assert results.main(["numbers", "--check", "--root", str(root), "--docs", str(docs)]) == 0
