"""The orchestrator end to end on hand-built items, and parity with MADQA's published formulas."""

import json
import random

import pytest

from engine.datasets.formats import Prediction, Question
from engine.eval.evaluate import EvalConfig, evaluate
from engine.eval.judge import ScriptedJudge
from engine.eval.reports.files import load_item_results, write_reports
from engine.eval.reports.html import PLOT_IDS
from engine.eval.trajectories import parse_episode

from . import madqa_reference

REQUIRED_KEYS = ("accuracy", "accuracy_ci", "exact_match", "semantic_accuracy", "page_f1", "doc_f1", "kuiper",
                 "kuiper_ci", "taxonomy", "n")


def q(qid, answer, evidence, **extra):
    return Question.from_json({"id": qid, "question": f"Question {qid}?", "answer_variants": [[answer]],
                               "evidence": [{"document": d, "page": p} for d, p in evidence], **extra}, "gold")


def p(obj):
    return Prediction.from_json(obj, "pred")


GOLD = [q("q1", "Alpha", [("a", 1)], domain="Financial"), q("q2", "Beta", [("b", 2)], domain="Legal"),
        q("q3", "Gamma", [("c", 1)], domain="Legal"), q("q4", "Delta", [("c", 3)]),
        q("q5", "Epsilon", [("e", 1), ("f", 1)])]
PREDICTIONS = [
    p({"id": "q1", "question": "Question q1?", "answer": "alpha", "citations": [{"document": "a", "page": 1}],
       "search_history": ["x", "y"]}),
    p({"id": "q2", "question": "Question q2?", "answer": "Bravo!", "citations": [{"document": "b", "page": 9}],
       "search_history": ["x", "y", "z", "w", "v"]}),
    p({"id": "q4", "question": "Question q4?", "answer": ["Delta"], "citations": [{"document": "c", "page": "3"}],
       "iterations": 3}),
    p({"question": "  Question q5?  ", "answer": "I cannot find this.", "citations": [], "iterations": 4}),
    p({"id": "zz", "question": "Not in gold?", "answer": "x"}),
]


def test_hand_built_run():
    report = evaluate(GOLD, PREDICTIONS, config=EvalConfig(bootstrap=200)).report
    for key in REQUIRED_KEYS:
        assert key in report, key
    assert report["n"] == 5 and report["missing_predictions"] == 1 and report["unmatched_predictions"] == 1
    assert report["matched_by_text"] == 1 and report["unmatched_prediction_ids"] == ["zz"]
    assert report["accuracy"] == pytest.approx(2 / 5)  # q1, q4; q3 has no prediction and counts wrong
    assert report["exact_match"] == pytest.approx(2 / 5)
    assert report["page_f1"] == pytest.approx(2 / 5)  # q1 and q4 (string page "3" matches 3)
    assert report["doc_f1"] == pytest.approx(3 / 5)  # q2 cites the right document
    # kept efforts 2 (right), 3 (right), 4 (wrong), 5 (wrong); q3 has none: D = .5 1 .5 0 -> K = 1
    assert report["kuiper"] == pytest.approx(1.0) and report["kuiper_dropped"] == 1
    assert report["wasted_effort_ratio"] == pytest.approx(4.5 / 2.5)
    assert report["taxonomy"]["counts"] == {"correct": 2, "correct_verbose": 0, "retrieval_failure": 0, "navigation_failure": 1,
                                            "comprehension_failure": 0, "refusal": 2, "unclassified": 0}
    assert report["semantic_accuracy"] is None and report["steps"] is None
    hops = report["breakdowns"]["hop_type"]
    assert hops["single"]["n"] == 4 and hops["cross_doc"]["n"] == 1
    assert report["breakdowns"]["domain"]["Legal"]["accuracy"] == 0.0
    assert report["breakdowns"]["domain"]["unknown"]["n"] == 2


def test_semantic_accuracy_with_a_scripted_judge():
    judge = ScriptedJudge({"Question q2?": "partial"})
    result = evaluate(GOLD, PREDICTIONS, config=EvalConfig(judge=judge, bootstrap=0))
    report = result.report
    assert [c[0] for c in judge.calls] == ["Question q2?"]  # exact, empty and refusing answers skip the judge
    assert report["semantic_raw"] == pytest.approx((1 + 0.5 + 0 + 1 + 0) / 5)
    # only the judged item is corrected (0.5 / 0.98); the first stage's 1, 0, 1, 0 count as they are
    assert report["semantic_accuracy"] == pytest.approx((2 + 0.5 / 0.98) / 5)
    assert report["semantic_judged_raw"] == 0.5 and report["semantic_clipped"] is None
    low, high = report["semantic_accuracy_ci"]
    assert low < report["semantic_accuracy"] < high
    assert report["judge_calls"] == 1
    by_id = {item.id: item for item in result.items}
    assert by_id["q2"].correct and by_id["q2"].taxonomy == "correct"  # partial (0.5) counts as correct
    assert report["accuracy"] == pytest.approx(2 / 5)  # `accuracy` stays ANLS*-based


def test_trajectories_and_coverage_sections():
    episode = parse_episode({"id": "q1", "steps": [
        {"tool_call": {"name": "search", "arguments": {"query": "alpha"}},
         "tool_result": {"pages": [{"document": "a", "page": 1}]}},
        {"tool_call": {"name": "answer", "arguments": {"answer": ["Alpha"]}}, "tool_result": None}]}, "t")
    gold = GOLD + [q("m1", "12.3", [("d1", 1)], source_rows=[{"document": "d1", "values": {"revenue": 12.34}}])]
    predictions = PREDICTIONS + [p({"id": "m1", "answer": "12.38", "document_dialogs": {"d1": "revenue 12.3"}})]
    report = evaluate(gold, predictions, [episode], EvalConfig(bootstrap=0)).report
    steps = report["steps"]
    assert steps["matched"] == 1 and [r["correct"] for r in steps["accuracy_at_budget"]] == [0, 1]
    assert steps["first_query"]["page_hit_rate"] == 1.0 and steps["query_drift"] is None
    assert report["mudabench_coverage"]["cell_accuracy"] == 1.0
    assert report["mudabench_accuracy"] == pytest.approx(3 / 6)  # q1, q4 and m1 (12.38 ~ 12.3)


def test_coverage_of_an_agent_without_records_is_a_dash_in_every_report(tmp_path):
    """rag and bm25 write no document_dialogs: their MuDABench coverage is not measured ("–"), not 0 of every
    fact (issue 50 item 5); evaluate used to pass {} for them, which scores every row wrong."""
    from engine.eval.reports.terminal import terminal_lines

    gold = GOLD + [q("m1", "12.3", [("d1", 1)], source_rows=[{"document": "d1", "values": {"revenue": 12.34}}])]
    report = evaluate(gold, PREDICTIONS + [p({"id": "m1", "answer": "12.38"})], config=EvalConfig(bootstrap=0)).report
    coverage = report["mudabench_coverage"]
    assert coverage["row_correct"] is None and coverage["row_total"] == 1 and coverage["records"] is False
    write_reports(tmp_path, report, [])
    assert "| row | — | – / 1 |" in (tmp_path / "report.md").read_text()
    assert "– / 1" in (tmp_path / "report.html").read_text()
    assert any("row — (–/1)" in line for line in terminal_lines(report))


def test_reports_are_written_and_items_round_trip(tmp_path):
    result = evaluate(GOLD, PREDICTIONS, config=EvalConfig(bootstrap=100))
    files = write_reports(tmp_path, result.report, result.items)
    assert json.loads((tmp_path / "report.json").read_text())["n"] == 5
    html = (tmp_path / "report.html").read_text()
    assert all(f'id="{plot_id}"' in html for plot_id in PLOT_IDS)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing to fetch
    assert "<script" not in html
    assert "| accuracy (ANLS* ≥ 0.5) | 40.0% |" in (tmp_path / "report.md").read_text()
    items = load_item_results(files["items"])
    assert [i.id for i in items] == ["q1", "q2", "q3", "q4", "q5"] and items[3].page_f1 == 1.0


def test_parity_with_madqa_published_formulas():
    rng = random.Random(11)
    words = ["alpha", "beta", "gamma", "delta", "$1,577", "2019", "board", "yes"]
    questions, predictions, raw_q, raw_p = [], [], [], []
    efforts = rng.sample(range(1, 5000), 400)  # distinct: Kuiper without ties
    for i in range(400):
        gold_answer = [rng.choice(words) for _ in range(rng.randint(1, 2))]
        evidence = [{"document": f"d{rng.randint(0, 5)}", "page": rng.randint(1, 4)} for _ in range(rng.randint(1, 3))]
        answer = gold_answer if rng.random() < 0.5 else [rng.choice(words) + rng.choice(["", "s", " x"])]
        citations = [{"document": f"d{rng.randint(0, 5)}", "page": rng.randint(1, 4)} for _ in range(rng.randint(0, 3))]
        gq = {"id": f"q{i}", "question": f"Q{i}?", "answer_variants": [gold_answer], "evidence": evidence}
        gp = {"id": f"q{i}", "question": f"Q{i}?", "answer": answer if len(answer) > 1 else answer[0],
              "citations": citations, "search_history": ["s"] * efforts[i]}
        raw_q.append(gq)
        raw_p.append(gp)
        questions.append(Question.from_json(gq, "g"))
        predictions.append(Prediction.from_json(gp, "p"))
    ours = evaluate(questions, predictions, config=EvalConfig(bootstrap=0)).report
    theirs = madqa_reference.evaluate(raw_q, raw_p)
    assert 0.2 < theirs["accuracy"] < 0.8 and theirs["kuiper"] is not None
    for key in ("accuracy", "page_f1", "doc_f1", "kuiper"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-9), key


def test_mudabench_file_through_the_importer(tmp_path):
    from engine.datasets.importers import import_questions

    raw = [{"question": "Which bank had the highest capital adequacy ratio in 2021?", "final_answer": "601398",
            "metadata": [
                {"symbol": "002142", "year": 2021, "value_capital_adequacy_ratio_pct": 15.44,
                 "schema": {"value_capital_adequacy_ratio_pct": "ratio"}, "id": "doc-a", "doctype": "annual report"},
                {"symbol": "601398", "year": 2021, "value_capital_adequacy_ratio_pct": 18.02,
                 "schema": {"value_capital_adequacy_ratio_pct": "ratio"}, "id": "doc-b", "doctype": "annual report"}],
            "source_answer": ["002142: 15.44%", "601398: 18.02%"]}]
    path = tmp_path / "mudabench.json"
    path.write_text(json.dumps(raw))
    questions, errors = import_questions("mudabench", path)
    assert not errors
    prediction = Prediction.from_json({"id": questions[0].id, "answer": "601398", "document_dialogs": {
        "doc-a": "Q: capital adequacy ratio 2021?\nA: 15.4%", "doc-b": "Q: capital adequacy ratio 2021?\nA: 18.1%"}},
        "p")
    result = evaluate(questions, [prediction], config=EvalConfig(bootstrap=0))
    coverage = result.report["mudabench_coverage"]
    # doc-a: 15.4 ~ 15.44 right; doc-b: 18.1 vs 18.02 wrong first decimal -> 1 of 2 cells and rows
    assert (coverage["cell_correct"], coverage["cell_total"], coverage["row_correct"]) == (1, 2, 1)
    assert coverage["column_accuracy"] == 0.0  # the one column is not right in every row
    assert result.items[0].hop_type == "cross_doc" and result.items[0].mudabench


@pytest.mark.parametrize("right", [True, False])
def test_all_correct_and_all_wrong_runs(right):
    predictions = [p({"id": g.id, "answer": g.answer_variants[0][0] if right else "zzzzzzzz",
                      "citations": [e.to_json() for e in g.evidence], "search_history": ["s"] * (i + 1)})
                   for i, g in enumerate(GOLD)]
    ticks = []
    report = evaluate(GOLD, predictions, config=EvalConfig(bootstrap=100, progress=ticks.append)).report
    assert sum(ticks) == len(GOLD)
    assert report["accuracy"] == (1.0 if right else 0.0)
    assert report["accuracy_ci"][1 if right else 0] == (1.0 if right else 0.0)
    assert report["kuiper"] is None and report["kuiper_ci"] is None and report["kuiper_p_value"] is None
    assert report["kuiper_undefined"] == ("every item is correct" if right else "no item is correct")
    assert report["page_f1"] == 1.0 and report["doc_f1"] == 1.0  # citations are exactly the gold pages
    assert report["taxonomy"]["counts"]["correct" if right else "comprehension_failure"] == 5
    assert report["wasted_effort_ratio"] is None
