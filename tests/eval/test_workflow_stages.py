"""The workflow stage taxonomy on hand-built predictions: each stage blamed exactly when its output is the first wrong one."""

import pytest

from engine.datasets.formats import Prediction, Question
from engine.eval.evaluate import evaluate
from engine.eval.reports.markdown import render_markdown
from engine.eval.analyses.workflow_stages import stage_error, stage_taxonomy

ROWS = [{"id": "a-2023", "company": "A", "year": 2023, "value_revenue_usd_million": 97.3},
        {"id": "b-2023", "company": "B", "year": 2023, "value_revenue_usd_million": 225.8}]
QUESTION = Question("q", "Average revenue in 2023?", [["161.55"]], [], {"metadata": ROWS})
PLAN = {"restriction": {"year": [2023]}, "fields": [{"name": "revenue", "type": "number", "unit": "USD million"}],
        "templates": [{"subquery": "Revenue of {company} in {year}?", "fields": ["revenue"]}], "period": "2023",
        "documents": ["a-2023", "b-2023"]}
RECORDS = [{"document": "a-2023", "company": "A", "revenue": 97.3, "revenue_unit": "USD million", "page": 2},
           {"document": "b-2023", "company": "B", "revenue": 225.8, "revenue_unit": "USD million", "page": 2}]
RAW = {"a-2023": {"revenue": {"value": "97,300", "scale": "thousands", "unit": "USD"}, "page": 2},
       "b-2023": {"revenue": {"value": "225.8", "scale": "millions", "unit": "USD"}, "page": 2}}


def prediction(answer="161.55", plan=PLAN, records=RECORDS, failure=None, raw=RAW, failed=(), printed="161.55\n"):
    flow = {"plan": plan, "records": records, "raw_records": raw, "failure": failure, "failed_documents": list(failed),
            "code": [{"code": "print(...)", "result": {"ok": True, "stdout": printed}}]}
    return Prediction("q", QUESTION.question, answer, [], [], 1, {"workflow": flow})


def test_code_is_blamed_when_every_record_is_right():
    assert stage_error(QUESTION, prediction("150", printed="150\n")) == "code"
    assert stage_error(QUESTION, prediction("Unknown", failure={"stage": "code", "reason": "x"}, printed="")) == "code"


def test_the_answer_step_is_blamed_when_the_program_printed_the_right_answer():
    assert stage_error(QUESTION, prediction("about 150")) == "answer"  # the program printed 161.55


@pytest.mark.parametrize(("changes", "stage"), [
    ({"plan": None, "failure": {"stage": "planning", "reason": "invalid"}}, "planning"),
    ({"plan": {**PLAN, "documents": ["a-2023"]}}, "planning"),  # missed a document
    ({"plan": {**PLAN, "documents": ["a-2023", "b-2023", "c-2023"]}}, "planning"),  # read one too many
    ({"plan": {**PLAN, "fields": [{"name": "net_income", "type": "number", "unit": "USD million"}],
               "templates": [{"subquery": "Net income of {company}?", "fields": ["net_income"]}]}}, "knowledge"),
    ({"records": RECORDS[:1]}, "extraction"),  # b yielded no record
    ({"records": RECORDS[:1], "failed": [{"document": "b-2023", "stage": "structuring", "reason": "x"}]},
     "structuring"),  # b answered, but its record failed twice
    ({"records": [RECORDS[0], {**RECORDS[1], "revenue": 212.4}],
      "raw": {**RAW, "b-2023": {"revenue": {"value": "212.4", "scale": "millions", "unit": "USD"}}}},
     "extraction"),  # wrong number
    ({"records": [{**RECORDS[0], "revenue": 97300.0}, RECORDS[1]]}, "structuring"),  # 97,300 read, scale lost
])
def test_the_first_wrong_stage_is_blamed(changes, stage):
    assert stage_error(QUESTION, prediction("150", printed="150\n", **changes)) == stage


def test_a_wrong_category_is_an_extraction_error():
    rows = [{"id": "a-2023", "company": "A", "year": 2023, "value_auditor": "KPMG"}]
    question = Question("q", "Who audited A?", [["KPMG"]], [], {"metadata": rows})
    plan = {**PLAN, "documents": ["a-2023"], "fields": [{"name": "auditor", "type": "category"}],
            "templates": [{"subquery": "Which firm audited {company}?", "fields": ["auditor"]}]}
    right = [{"document": "a-2023", "auditor": "kpmg", "page": 2}]
    assert stage_error(question, prediction("PwC", plan=plan, records=right, raw={}, printed="PwC")) == "code"
    wrong = [{"document": "a-2023", "auditor": "PwC", "page": 2}]
    assert stage_error(question, prediction("PwC", plan=plan, records=wrong, raw={}, printed="PwC")) == "extraction"


def test_other_agents_are_unattributed_and_taxonomy_is_absent_without_workflow_runs():
    plain = Prediction("q", QUESTION.question, "150", [], [], 1, {})
    assert stage_error(QUESTION, plain) == "unattributed"
    assert stage_taxonomy([(QUESTION, plain, False)]) is None


def test_evaluate_reports_accuracy_coverage_and_the_stage_taxonomy():
    questions = [QUESTION, Question("q2", "Same again?", [["161.55"]], [], {"metadata": ROWS})]
    wrong = prediction("150", printed="150\n")
    wrong = Prediction("q2", "Same again?", "97", [], [], 1, {"workflow": {**wrong.extra["workflow"],
                                                                       "records": RECORDS[:1]}})
    right = prediction("161.55")
    right.extra["document_dialogs"] = {"a-2023": "Record: revenue 97.3", "b-2023": "Record: revenue 225.8"}
    report = evaluate(questions, [right, wrong]).report
    assert report["mudabench_accuracy"] == pytest.approx(0.5)
    assert report["workflow_stages"]["counts"] == {"planning": 0, "knowledge": 0, "extraction": 1, "structuring": 0,
                                                  "code": 0, "answer": 0, "unattributed": 0}
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
