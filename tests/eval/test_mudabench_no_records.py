"""MuDABench fact coverage is "–", not 0/N, for an agent that keeps no per-document records (issue 50 item 5).

rag and bm25 write no `document_dialogs`; mudabench-sample showed them at "rows 0/58", as if they had kept
records and every fact in them were wrong. A run that keeps records and has none for a question still
scores that question 0.
"""

from __future__ import annotations

from engine.eval.metrics.mudabench import combine_coverage, coverage_for_question, tolerance_row_judge
from tests.scripts import load_script

ROWS = [{"document": "doc-1", "values": {"revenue": 12.34}, "details": {"unit": "USD"}},
        {"document": "doc-2", "values": {"revenue": 7.5}, "details": {"unit": "USD"}}]


def test_no_records_is_not_measured_rather_than_all_wrong():
    per_question = coverage_for_question("Total revenue?", ROWS, None, tolerance_row_judge)
    assert (per_question["row_correct"], per_question["row_total"]) == (None, 2)
    assert (per_question["cell_correct"], per_question["cell_total"]) == (None, 4)
    combined = combine_coverage([per_question, per_question])
    assert combined["row_accuracy"] is None and combined["cell_accuracy"] is None
    assert combined["row_correct"] is None and combined["row_total"] == 4 and combined["records"] is False


def test_a_run_that_keeps_records_still_scores_a_question_without_them_as_wrong():
    kept = coverage_for_question("Total revenue?", ROWS, {"doc-1": "Q: revenue?\nA: 12.3 USD"}, tolerance_row_judge)
    empty = coverage_for_question("Total revenue?", ROWS, {}, tolerance_row_judge)
    assert (kept["row_correct"], empty["row_correct"]) == (1, 0)
    combined = combine_coverage([kept, empty])
    assert combined["row_accuracy"] == 1 / 4 and "records" not in combined


def test_the_results_table_shows_a_dash_for_an_agent_without_records():
    results = load_script("results")
    coverage = combine_coverage([coverage_for_question("Total revenue?", ROWS, None, tolerance_row_judge)])
    row = {"name": "rag", "label": "rag", "status": "complete", "wall_s": 1.0, "args": [],
           "figures": {"n": 1, "correct": 0, "accuracy": 0.0, "accuracy_ci": [0.0, 0.79], "exact_match": 0.0,
                       "page_f1": 0.0, "doc_f1": 0.0, "kuiper": None, "kuiper_ci": None,
                       "searches_per_question": 1.0, "first_query_page_hit": None, "taxonomy": {},
                       "mudabench_coverage": coverage}}
    markdown = results.render_markdown({"title": "t", "table": "t", "suite": "mudabench", "limit": None,
                                        "verdict": "mudabench", "reference": "rag", "models": [], "rows": [row],
                                        "claims": [], "min_discordant_for_p05": 6, "notes": []})
    assert "rows –/2, cells –/4, columns –/2 (the agent keeps no per-document records)" in markdown
