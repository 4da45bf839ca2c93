"""The workflow stage taxonomy on hand-built predictions: each stage blamed exactly when its output is the first wrong one."""

import pytest

from engine.datasets.formats import Prediction, Question
from engine.eval.evaluate import evaluate
from engine.eval.reports.markdown import render_markdown
from engine.eval.analyses.workflow_stages import stage_error, stage_taxonomy

ROWS = [{"id": "a-2023", "company": "A", "year": 2023, "value_revenue_usd_million": 97.3},
        {"id": "b-2023", "company": "B", "year": 2023, "value_revenue_usd_million": 225.8}]
QUESTION = Question("q", "Average revenue in 2023?", [["161.55"]], [], {"metadata": ROWS})
PLAN = {"restriction": {"year": [2023]}, "subquery": "Revenue of {company} in {year}?", "field": "revenue",
        "unit": "USD million", "period": "2023", "documents": ["a-2023", "b-2023"]}
RECORDS = [{"document": "a-2023", "value": 97.3, "unit": "USD million", "page": 2, "raw_value": "97,300",
            "raw_scale": "thousands", "raw_unit": "USD"},
           {"document": "b-2023", "value": 225.8, "unit": "USD million", "page": 2, "raw_value": "225.8",
            "raw_scale": "millions", "raw_unit": "USD"}]


def prediction(answer="161.55", plan=PLAN, records=RECORDS, failure=None):
    flow = {"plan": plan, "records": records, "failure": failure, "failed_documents": []}
    return Prediction("q", QUESTION.question, answer, [], [], 1, {"workflow": flow})


def test_code_is_blamed_when_every_record_is_right():
    assert stage_error(QUESTION, prediction("150")) == "code"
    assert stage_error(QUESTION, prediction("Unknown", failure={"stage": "code", "reason": "x"})) == "code"


@pytest.mark.parametrize(("changes", "stage"), [
    ({"plan": None, "failure": {"stage": "planning", "reason": "invalid"}}, "planning"),
    ({"plan": {**PLAN, "documents": ["a-2023"]}}, "planning"),  # missed a document
    ({"plan": {**PLAN, "documents": ["a-2023", "b-2023", "c-2023"]}}, "planning"),  # read one too many
    ({"plan": {**PLAN, "field": "net income", "subquery": "Net income of {company}?"}}, "knowledge"),
    ({"records": RECORDS[:1]}, "extraction"),  # b yielded no record
    ({"records": [RECORDS[0], {**RECORDS[1], "raw_value": "212.4", "value": 212.4}]}, "extraction"),  # wrong number
    ({"records": [{**RECORDS[0], "value": 97300.0}, RECORDS[1]]}, "normalisation"),  # 97,300 read, scale lost
])
def test_the_first_wrong_stage_is_blamed(changes, stage):
    assert stage_error(QUESTION, prediction("150", **changes)) == stage


def test_other_agents_are_unattributed_and_taxonomy_is_absent_without_workflow_runs():
    plain = Prediction("q", QUESTION.question, "150", [], [], 1, {})
    assert stage_error(QUESTION, plain) == "unattributed"
    assert stage_taxonomy([(QUESTION, plain, False)]) is None


def test_evaluate_reports_accuracy_coverage_and_the_stage_taxonomy():
    questions = [QUESTION, Question("q2", "Same again?", [["161.55"]], [], {"metadata": ROWS})]
    wrong = prediction("150")
    wrong = Prediction("q2", "Same again?", "97", [], [], 1, {"workflow": {**wrong.extra["workflow"],
                                                                       "records": RECORDS[:1]}})
    right = prediction("161.55")
    right.extra["document_dialogs"] = {"a-2023": "Record: 97.3 USD million", "b-2023": "Record: 225.8 USD million"}
    report = evaluate(questions, [right, wrong]).report
    assert report["mudabench_accuracy"] == pytest.approx(0.5)
    assert report["workflow_stages"]["counts"] == {"planning": 0, "knowledge": 0, "extraction": 1, "normalisation": 0,
                                                  "code": 0, "unattributed": 0}
    assert report["mudabench_coverage"]["cell_correct"] == 2 and report["mudabench_coverage"]["cell_total"] == 4
    markdown = render_markdown(report)
    assert "## Workflow stage taxonomy" in markdown and "| extraction | 1 | 100.0% |" in markdown


def test_compare_can_count_the_mudabench_tolerance_verdict():
    from engine.eval.compare import compare_items

    gold = [Question(f"n{i}", f"Number {i}?", [[f"{100 + i}.37"]], [], {}) for i in range(4)]
    near = [Prediction(f"n{i}", "", f"{100 + i}.3", [], [], 1, {}) for i in range(4)]  # right under the tolerance
    off = [Prediction(f"n{i}", "", f"{100 + i}.4" if i else f"{100 + i}.31", [], [], 1, {}) for i in range(4)]
    a, b = evaluate(gold, near).items, evaluate(gold, off).items
    tolerance = compare_items(a, b, verdict="mudabench")
    assert (tolerance["accuracy_a"], tolerance["accuracy_b"], tolerance["only_a_correct"]) == (1.0, 0.25, 3)
    assert compare_items(a, b)["accuracy_a"] == sum(i.correct for i in a) / 4  # the default verdict is ANLS*/judge
