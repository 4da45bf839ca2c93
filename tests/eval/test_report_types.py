"""The typed report (engine/eval/report.py): report.json <-> Report, for today's reports and older ones."""

import json

from engine.eval.evaluate import EvalConfig, evaluate
from engine.eval.judge import ScriptedJudge
from engine.eval.provenance import record_provenance
from engine.eval.report import REPORT_VERSION, Report, Summary
from engine.eval.trajectories import parse_episode

from .test_evaluate import GOLD, PREDICTIONS, p, q

EPISODE = parse_episode({"id": "q1", "steps": [
    {"tool_call": {"name": "search", "arguments": {"query": "alpha"}},
     "tool_result": {"pages": [{"document": "a", "page": 1}]}},
    {"tool_call": {"name": "answer", "arguments": {"answer": ["Alpha"]}}, "tool_result": None}]}, "t")


def _result():
    gold = GOLD + [q("m1", "12.3", [("d1", 1)], source_rows=[{"document": "d1", "values": {"revenue": 12.34}}])]
    predictions = PREDICTIONS + [p({"id": "m1", "answer": "12.38", "document_dialogs": {"d1": "revenue 12.3"}})]
    return evaluate(gold, predictions, [EPISODE], EvalConfig(bootstrap=50))


def test_round_trip_of_a_real_evaluation_keeps_every_key_in_order():
    result = _result()
    record_provenance(result.report, None, "defaults", None, None, {"gold": "g.jsonl"}, {"source": "silver"})
    result.report["judge_summary"] = {"agreement": 0.9}  # a caller's own key (scripts/results_common.py adds this)
    report = result.typed
    assert report.report_version == REPORT_VERSION == result.report["report_version"] == 1
    assert Report.from_dict(report.to_dict()) == report
    written = json.loads(json.dumps(result.report))  # as report.json holds it (tuples become lists)
    assert list(report.to_dict()) == list(result.report)
    assert json.loads(json.dumps(report.to_dict())) == written
    # the typed fields carry the numbers the dict keys do
    assert report.summary.accuracy == result.report["accuracy"] and report.summary.n == 6
    assert report.summary.scorers["mudabench"].value == result.report["mudabench_accuracy"]
    assert report.summary.detail is not None and report.summary.detail.kuiper_curve == result.report["kuiper_curve"]
    legal = report.breakdowns["domain"]["Legal"]
    assert isinstance(legal, Summary) and legal.n == 2 and legal.detail is None
    assert report.steps["matched"] == 1 and report.sections["guessability"] is None
    assert report.inputs == {"gold": "g.jsonl"} and report.source == "silver"
    assert report.judge.used is False and report.judge.provenance["calibration_source"] == "defaults"
    assert report.extra == {"judge_summary": {"agreement": 0.9}}


def test_typed_report_of_a_judged_run():
    judge = ScriptedJudge({"Question q2?": "correct"})
    report = evaluate(GOLD, PREDICTIONS, config=EvalConfig(judge=judge, bootstrap=0)).typed
    assert report.judge.used is True and report.summary.semantic_raw is not None
    assert Report.from_dict(report.to_dict()) == report


def test_an_older_report_without_some_keys_reads_them_as_none():
    today = _result().report
    older = {k: v for k, v in today.items()
             if k not in ("report_version", "mudabench_scoring", "effort_measures", "numeric_accuracy",
                          "numeric_accuracy_ci", "kuiper_curve", "kuiper_madqa", "wasted_effort_ratio",
                          "mean_steps_correct", "mean_steps_incorrect", "qguide", "guessability", "judge")}
    report = Report.from_dict(older)
    assert report.report_version is None and report.mudabench_scoring is None and report.effort_measures is None
    assert report.judge is None and "numeric" not in report.summary.scorers and report.summary.detail is None
    assert "qguide" not in report.sections and report.summary.accuracy == today["accuracy"]
    assert Report.from_dict(report.to_dict()) == report
    assert Report.from_dict({}).summary.n is None  # nothing at all: every field None, no exception


def test_the_renderers_read_the_typed_report():
    from engine.eval.reports.html import render_html
    from engine.eval.reports.markdown import render_markdown
    from engine.eval.reports.terminal import terminal_lines

    result = _result()
    report = result.typed
    assert render_markdown(report) == render_markdown(result.report)  # a Report or its report.json dict
    assert terminal_lines(report) == terminal_lines(result.report)
    report.summary.scorers["numeric"].value = 0.125  # a typed field, changed, is what every renderer shows
    report.n_predictions = 4321
    assert "| numeric (±1 %) | 12.5% |" in render_markdown(report)
    assert "4321 predictions" in render_html(report) and terminal_lines(report)[0].startswith("6 gold items, 4321 predictions")
