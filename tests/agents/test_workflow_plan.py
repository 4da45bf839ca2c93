"""Several sub-query templates per plan: MuDABench's three template rules, each checked with the message the
model sees on its retry, and plans whose templates together fill typed multi-column records."""

import json

import pytest

from engine.agents.workflow.plan import parse_plan, plan_schema
from tests.agents.test_workflow import run
from tests.agents.workflow_scripted import (AUDITOR, INCOME, INCOME_2023, PLAN, REVENUE, REVENUE_2023, build_corpus,
                                            code_reply, doc, plan_reply, question, workflow_policy)
from tests.kernel_sandbox import needs_kernel_sandbox

pytestmark = needs_kernel_sandbox

METADATA = {doc(c, y): {"company": c, "year": y, "report_type": "annual report"}
            for c, y in [("Alder", 2022), ("Alder", 2023), ("Birch", 2023), ("Cedar", 2023)]}
METADATA["alder-sr-2023"] = {"company": "Alder", "year": 2023, "report_type": "sustainability report"}
REVENUE_T = {"subquery": "What was the revenue of {company} in {year} ({report_type})?", "fields": ["revenue"]}
AUDITOR_T = {"subquery": "Which firm audited the accounts of {company} for {year}?", "fields": ["auditor"]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("reports") / "c")


def plan(**changes) -> str:
    return json.dumps({**PLAN, "fields": [REVENUE, AUDITOR], "templates": [REVENUE_T, AUDITOR_T], **changes})


def test_two_templates_are_checked_and_each_asked_of_its_documents():
    restricted = {**AUDITOR_T, "restriction": {"company": ["Alder", "Birch"]}}  # a template's own restriction
    parsed = parse_plan(plan(templates=[REVENUE_T, restricted]), METADATA)
    annual = ["alder-ar-2023", "birch-ar-2023", "cedar-ar-2023"]
    assert parsed.documents == annual
    assert [t.documents for t in parsed.templates] == [annual, ["alder-ar-2023", "birch-ar-2023"]]
    assert [f.name for f in parsed.fields_of("cedar-ar-2023")] == ["revenue"]  # not asked for its auditor
    assert [f.name for f in parsed.fields_of("alder-ar-2023")] == ["revenue", "auditor"]
    schema = plan_schema({"year": {"type": "integer", "values": [2022, 2023]}})
    assert schema["properties"]["templates"]["maxItems"] == 4
    number, other = schema["properties"]["fields"]["items"]["anyOf"]  # a number field cannot lack its unit
    assert number["required"] == ["name", "type", "unit"] and number["properties"]["type"] == {"const": "number"}
    assert other["properties"]["type"]["enum"] == ["category", "boolean", "date", "text"]


@pytest.mark.parametrize(("changes", "message"), [
    # single document: the filled template must differ between its documents
    ({"templates": [{"subquery": "What was the total revenue in {year} of the {report_type}s?", "fields": ["revenue"]},
                    AUDITOR_T]},
     "template 1 reads the same for alder-ar-2023 and birch-ar-2023 ('What was the total revenue in 2023 of the "
     "annual reports?'): it is not a single-document question"),
    # mutual exclusivity: the same question twice, or one field asked by two templates of one document
    ({"templates": [REVENUE_T, {**REVENUE_T, "subquery": "What  was the REVENUE of {company} in {year} "
                                                          "({report_type})?"}]},
     "templates 1 and 2 ask the same question; templates must be mutually exclusive"),
    ({"templates": [REVENUE_T, {**AUDITOR_T, "fields": ["auditor", "revenue"]}]},
     "templates 1 and 2 both ask for 'revenue' of alder-ar-2023; templates must be mutually exclusive"),
    # metadata placement: every field the plan selects on is in braces somewhere
    ({"templates": [{"subquery": "What was the revenue of {company} in {year}?", "fields": ["revenue"]}, AUDITOR_T]},
     "the plan selects on 'report_type' but no template has {report_type}"),
    ({"templates": [{"subquery": "What was the revenue of {company} in {year}?", "fields": ["revenue"],
                     "restriction": {"report_type": ["annual report"]}},  # the templates' own restrictions
                    {**AUDITOR_T, "restriction": {"report_type": ["annual report"]}}],
      "restriction": {"year": [2023]}},
     "the plan selects on 'report_type' but no template has {report_type}"),
    ({"templates": [REVENUE_T, {**AUDITOR_T, "subquery": "Which firm audited {firm}?"}]},
     "template 2 uses {firm}, which is not a metadata field"),
    # the fields and the templates agree
    ({"templates": [REVENUE_T]}, "no template asks for the field 'auditor'"),
    ({"templates": [REVENUE_T, {**AUDITOR_T, "fields": ["chair"]}]},
     "template 2 asks for 'chair', which the plan's 'fields' do not declare"),
    ({"fields": [REVENUE, {"name": "year", "type": "number", "unit": "count"}]}, "field 'year' is a metadata field"),
    ({"fields": [REVENUE, {"name": "auditor", "type": "colour"}]}, "field 'auditor' has type 'colour'"),
    ({"templates": [REVENUE_T, {**AUDITOR_T, "restriction": {"year": [2022]}}]},
     "template 2's restriction {\"year\": [2022]} selects none of the plan's documents"),
    ({"templates": [REVENUE_T] * 5}, "5 templates; at most 4"),
])
def test_each_template_rule_names_what_to_fix(changes, message):
    from tools.errors import DossierError

    with pytest.raises(DossierError) as err:
        parse_plan(plan(**changes), METADATA)
    assert message in str(err.value)


def test_a_broken_rule_is_shown_on_the_retry_then_the_question_is_unknown_at_planning(tmp_path, corpus):
    same = plan(templates=[{"subquery": "What was the total revenue in {year} ({report_type})?",
                            "fields": ["revenue"]}, AUDITOR_T])
    summary, preds, trajs, backend = run(tmp_path, corpus, workflow_policy(plans=[same, same]))
    p = preds["w1"]
    assert p.answer == "Unknown" and p.extra["workflow"]["failure"]["stage"] == "planning"
    assert "it is not a single-document question" in p.extra["workflow"]["failure"]["reason"]
    retry = trajs["w1"]["steps"][1]["input_delta"]
    assert retry.startswith("<user> That plan failed: template 1 reads the same for alder-ar-2023 and birch-ar-2023")
    assert backend.opened == 1  # no document was read
    # the retry samples (seeded by the runner), so it is not a greedy copy of the rejected plan (issue 50 item 5)
    from engine.agents.workflow.episode import RETRY_TEMPERATURE

    temperatures = [turn.temperature for qid, turn in backend.submitted if qid == "w1"]
    assert temperatures == [None, RETRY_TEMPERATURE] and RETRY_TEMPERATURE > 0


def test_a_turns_own_temperature_reaches_the_engine_seeded():
    """EngineBackend samples a turn at its own temperature (the run's otherwise), with the runner's seed."""
    from engine.agents.actions import Turn
    from engine.agents.backend import EngineBackend

    class Engine:
        processor = None
        max_context = 4096
        params = []

        def submit(self, session, params):
            self.params.append(params)

    backend = EngineBackend(Engine(), max_new_tokens=64, structured=False, temperature=0.0)
    backend.submit(object(), Turn([("user", "plan")], allow_search=False), seed=11)
    backend.submit(object(), Turn([("user", "again")], allow_search=False, temperature=0.7), seed=12)
    assert [(p.temperature, p.seed) for p in Engine.params] == [(0.0, 11), (0.7, 12)]


def test_two_templates_fill_one_record_per_document_with_a_number_and_a_category(tmp_path, corpus):
    code = code_reply("print(', '.join(sorted(r['company'] for r in records if r['auditor'] == 'KPMG' "
                      "and r['revenue'] > 100)))")
    q = question(text="Which companies audited by KPMG had revenue above 100 million US dollars in 2023?",
                 answer="Cedar")
    _, preds, trajs, backend = run(tmp_path, corpus, workflow_policy(plans=[plan()], codes=[code]), questions=[q])
    p, flow = preds["w1"], trajs["w1"]["workflow"]
    assert p.answer == "Cedar"  # Alder is KPMG's but 97.3; Birch is above 100 but Deloitte's
    assert [(x["document"], x["template"], x["asked"]) for x in flow["extractions"]][:2] == [
        ("alder-ar-2023", 0, ["revenue"]), ("birch-ar-2023", 0, ["revenue"])]
    assert len(flow["extractions"]) == 8  # 2 templates x 4 documents, each its own sub-question
    assert {r["document"]: (r["revenue"], r["auditor"]) for r in flow["records"]} == {
        "alder-ar-2023": (97.3, "KPMG"), "birch-ar-2023": (225.8, "Deloitte"), "cedar-ar-2023": (131.5, "KPMG"),
        "dune-ar-2023": (71.3, "PwC")}
    alder = trajs["w1"]["workflow"]["structuring"][0]
    assert alder["record"] == {"revenue": {"value": "97,300", "scale": "thousands", "unit": "USD"},
                               "auditor": "KPMG", "page": 2}
    structure_turn = next(t for qid, t in backend.submitted if qid == "w1/structure/alder-ar-2023")
    properties = structure_turn.schema["properties"]  # the record schema, built from the plan's declared types
    assert list(properties) == ["revenue", "auditor", "page"]
    assert properties["revenue"]["anyOf"][0]["required"] == ["value", "scale", "unit"]
    assert properties["auditor"]["anyOf"][0] == {"type": "string", "minLength": 1, "maxLength": 80}
    dialog = structure_turn.messages[1][1].split("Its dialog:\n", 1)[1]
    assert dialog.count("Q: ") == 2  # both sub-questions of the document go to its one structuring turn
    assert [qid for qid, _ in backend.submitted if qid.startswith("w1/alder-ar-2023")][:1] == ["w1/alder-ar-2023#1"]


def test_one_template_can_ask_for_two_numbers_a_two_column_record(tmp_path, corpus):
    both = {"subquery": "What were the revenue and the net income of {company} in {year} ({report_type})?",
            "fields": ["revenue", "net_income"]}
    code = code_reply("best = max(records, key=lambda r: r['net_income'] / r['revenue'])\nprint(best['company'])")
    q = question(text="Which company had the highest net margin in 2023?", answer="Cedar")
    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy(plans=[plan(fields=[REVENUE, INCOME],
                                                                           templates=[both])], codes=[code]),
                             questions=[q])
    margins = {c: INCOME_2023[c] / REVENUE_2023[c] for c in REVENUE_2023}
    assert preds["w1"].answer == max(margins, key=margins.get) == "Cedar"
    rows = {r["company"]: (r["revenue"], r["net_income"]) for r in trajs["w1"]["workflow"]["records"]}
    assert rows == {c: (REVENUE_2023[c], INCOME_2023[c]) for c in REVENUE_2023}  # Dune's (3.8) read as -3.8
