"""Typed records and the structuring step: every field type checked, numbers converted by Dossier with the
user's conversion table, a currency without a rate named and left unconverted, a wrong type retried once then
left out and listed."""

import json

import pytest

from engine.agents.workflow.records import ConversionTable, FieldSpec, convert, parse_fields, parse_record, \
    record_schema
from tests.agents.test_workflow import run
from tests.agents.workflow_scripted import build_corpus, structurer, workflow_policy
from tools.errors import DossierError
from tests.kernel_sandbox import needs_kernel_sandbox

pytestmark = needs_kernel_sandbox

FIELDS = parse_fields([{"name": "revenue", "type": "number", "unit": "USD million"},
                       {"name": "auditor", "type": "category", "values": ["KPMG", "PwC"]},
                       {"name": "profitable", "type": "boolean"}, {"name": "agm_date", "type": "date"},
                       {"name": "chair", "type": "text"}])
GOOD = {"revenue": {"value": "(1,250.5)", "scale": "thousands", "unit": "EUR"}, "auditor": "PwC", "profitable": False,
        "agm_date": "2023-05-17", "chair": "Ana Ruiz", "page": 3}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("reports") / "c")


def test_every_field_type_is_parsed_and_the_schema_follows_the_declared_types():
    assert parse_record(json.dumps(GOOD), FIELDS) == GOOD
    schema = record_schema(FIELDS, [2, 3], 9)
    props = schema["properties"]
    assert schema["required"] == ["revenue", "auditor", "profitable", "agm_date", "chair", "page"]
    assert props["auditor"]["anyOf"][0] == {"enum": ["KPMG", "PwC"]} and props["profitable"]["anyOf"][0] == {
        "type": "boolean"}
    assert props["agm_date"]["anyOf"][0]["pattern"].startswith("^[0-9]{4}") and props["page"]["enum"] == [2, 3]
    assert all(p["anyOf"][1] == {"type": "null"} for name, p in props.items() if name != "page")


@pytest.mark.parametrize(("change", "message"), [
    ({"revenue": "1,250"}, "revenue must be {\"value\", \"scale\", \"unit\"}"),
    ({"revenue": {"value": "about 5", "scale": "units", "unit": "USD"}}, "value 'about 5' is not a number"),
    ({"revenue": {"value": "5", "scale": "dozens", "unit": "USD"}}, "revenue: scale 'dozens' is not one of"),
    ({"auditor": "EY"}, "auditor: 'EY' is not one of KPMG, PwC"),
    ({"profitable": "yes"}, "profitable must be true or false (got 'yes')"),
    ({"agm_date": "17 May 2023"}, "agm_date: '17 May 2023' is not a date written YYYY-MM-DD"),
    ({"chair": 7}, "chair must be a text written as text (got 7)"),
    ({"page": 0}, "page 0 is not a page number"),
    ({k: None for k in ("revenue", "auditor", "profitable", "agm_date", "chair")}, "every field of the record is null"),
])
def test_a_wrong_type_is_an_error_naming_the_field(change, message):
    with pytest.raises(DossierError) as err:
        parse_record(json.dumps({**GOOD, **change}), FIELDS)
    assert message in str(err.value)


def test_conversion_uses_the_table_and_its_inverse(tmp_path):
    path = tmp_path / "rates.json"
    path.write_text(json.dumps({"CNY/USD": 0.14, "USD/EUR": 0.8}))
    table = ConversionTable.load(path)
    cny = convert({"value": "1,000", "scale": "millions", "unit": "CNY"}, "USD million", table)
    assert (cny.value, cny.unit, cny.unconverted) == (pytest.approx(140.0), "USD million", None)
    eur = convert({"value": "(8)", "scale": "units", "unit": "EUR"}, "USD thousand", table)  # 1 EUR = 1.25 USD
    assert eur.value == pytest.approx(-0.01) and eur.unit == "USD thousand"
    jpy = convert({"value": "5,000", "scale": "millions", "unit": "JPY"}, "USD billion", table)
    assert (jpy.value, jpy.unit) == (5.0, "JPY billion") and "no JPY/USD rate in the conversion table" in jpy.unconverted
    assert convert({"value": "2,405", "scale": "units", "unit": "count"}, "count", table).value == 2405
    with pytest.raises(DossierError, match="the page gives percent, but the plan asks for money in USD million"):
        convert({"value": "4", "scale": "units", "unit": "percent"}, "USD million", table)


@pytest.mark.parametrize(("content", "message"), [
    (None, "does not exist; write JSON such as"),
    ("{oops", "is not valid JSON"),
    ('{"CNY": 0.14}', "'CNY' is not FROM/TO"),
    ('{"CNY/USD": -1}', "the rate of CNY/USD must be positive"),
    ('{"CNY/USD": "cheap"}', "the rate of CNY/USD is 'cheap', not a number"),
])
def test_a_bad_conversion_table_says_what_to_write(tmp_path, content, message):
    path = tmp_path / "rates.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DossierError, match=message):
        ConversionTable.load(path)


def _birch_in_cny(qid, turn, messages):
    reply = json.loads(structurer(qid, turn, messages))
    if qid.endswith("birch-ar-2023"):
        reply["revenue"] = {"value": "1,600", "scale": "millions", "unit": "CNY"}  # as a yuan filing prints it
    return json.dumps(reply)


def test_structuring_converts_a_currency_with_the_users_table(tmp_path, corpus):
    path = tmp_path / "rates.json"
    path.write_text(json.dumps({"CNY/USD": 0.14}))
    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy(structure=_birch_in_cny), conversion_table=str(path))
    flow = trajs["w1"]["workflow"]
    birch = next(r for r in flow["records"] if r["document"] == "birch-ar-2023")
    assert birch["revenue"] == pytest.approx(224.0) and birch["revenue_unit"] == "USD million"  # 1,600 x 0.14
    assert flow["unconverted"] == [] and flow["conversion_table"]["rates"] == {"CNY/USD": 0.14}
    assert preds["w1"].answer == "131.025"  # (97.3 + 224 + 131.5 + 71.3) / 4


def test_a_currency_without_a_rate_is_named_and_left_unconverted(tmp_path, corpus):
    _, preds, trajs, _ = run(tmp_path, corpus, workflow_policy(structure=_birch_in_cny))
    flow = trajs["w1"]["workflow"]
    birch = next(r for r in flow["records"] if r["document"] == "birch-ar-2023")
    assert (birch["revenue"], birch["revenue_unit"]) == (1600.0, "CNY million")  # the program sees the unit
    assert flow["unconverted"] == [{"document": "birch-ar-2023", "field": "revenue", "unit": "CNY",
                                    "reason": "no CNY/USD rate in the conversion table (built in); left in CNY"}]
    step = next(s for s in trajs["w1"]["steps"] if s["stage"] == "structure" and s["document"] == "birch-ar-2023")
    assert step["tool_result"]["unconverted"][0]["unit"] == "CNY"  # named in the trajectory's step too
    assert preds["w1"].extra["workflow"]["unconverted"] == flow["unconverted"]


def test_a_record_of_the_wrong_type_twice_is_left_out_and_listed(tmp_path, corpus):
    def structure(qid, turn, messages):
        if qid.endswith("dune-ar-2023"):
            return json.dumps({"revenue": "71.3 million", "page": 2})  # a string where a number object is due
        return structurer(qid, turn, messages)

    policy = workflow_policy(structure=structure, codes=[json.dumps({"code": "print(len(records))"})])
    _, preds, trajs, _ = run(tmp_path, corpus, policy)
    p = preds["w1"]
    assert p.answer == "3"
    assert p.extra["workflow"]["failed_documents"] == [
        {"document": "dune-ar-2023", "stage": "structuring",
         "reason": "revenue must be {\"value\", \"scale\", \"unit\"} (got '71.3 million')"}]
    steps = [s for s in trajs["w1"]["steps"] if s["stage"] == "structure" and s["document"] == "dune-ar-2023"]
    assert len(steps) == 2 and steps[1]["input_delta"].startswith("<user> That record failed: revenue must be")
    assert "Error: revenue must be" in p.extra["document_dialogs"]["dune-ar-2023"]


def test_field_declarations_are_checked():
    assert parse_fields([{"name": "n", "type": "number", "unit": "count"}]) == [FieldSpec("n", "number", "count")]
    for items, message in [([], "at least one fact"), ([{"name": "Revenue", "type": "number"}], "lower case"),
                           ([{"name": "x", "type": "number", "unit": "kg"}], "has unit 'kg'"),
                           ([{"name": "x", "type": "text"}] * 2, "declared twice")]:
        with pytest.raises(DossierError, match=message):
            parse_fields(items)


def test_a_bad_conversion_table_is_refused_with_the_settings(tmp_path):
    from engine.agents.settings import AgentSettings

    with pytest.raises(DossierError, match="rates.json does not exist"):
        AgentSettings(agent="workflow", conversion_table=str(tmp_path / "rates.json"))
