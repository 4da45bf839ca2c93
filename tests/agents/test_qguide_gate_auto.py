"""`dossier run --agent qguide --gate auto` end to end through the CLI, with a scripted model: the τ table
reaches the run-start output (stderr, so `--format json` keeps stdout one JSON document) and run.json,
and a question about a calibrated document is refused before the model loads."""

import json

import pytest
from typer.testing import CliRunner

from engine.datasets.formats import Evidence, Question, write_jsonl
from tests.agents.test_qguide import make_corpus, q, run, submit
from tools.errors import DossierError

TABLE_LINE = "τ = min{ℓ : ρ(ℓ) ≥ 0.9} = med"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("qguide_gate_auto"))


@pytest.fixture
def calibration(tmp_path, corpus):
    """A calibration run on the memo where med answers are right and high ones wrong: τ for ρ_min 0.9 is med."""

    def calibrating(qid, turn, messages):
        return submit("$48,250" if qid == "c1" else "$2,740" if qid == "c2" else "nonsense",
                      "high" if qid == "c3" else "med")

    memo = [q("c1"), Question("c2", "Capital expenditure?", [["$2,740"]], [Evidence("memo", 2)], {"document": "memo"}),
            Question("c3", "Revenue?", [["$48,250"]], [Evidence("memo", 1)], {"document": "memo"})]
    (tmp_path / "calib").mkdir()
    run(tmp_path / "calib", corpus, calibrating, memo, gate="low")
    return tmp_path / "calib" / "run0"


def _fee(qid="t1"):
    return Question(qid, "What is the annual fee?", [["$120"]], [Evidence("long", 5)], {"document": "long"})


def _invoke(tmp_path, corpus, calibration, questions, fmt):
    from engine.cli.main import app

    path = tmp_path / "questions.jsonl"
    write_jsonl(path, questions)
    return CliRunner().invoke(app, ["run", "--agent", "qguide", "--questions", str(path), "--corpus", str(corpus),
                                    "--out", str(tmp_path / "out"), "--gate", "auto", "--rho-min", "0.9",
                                    "--calibration", str(calibration), "--chunk-pages", "6", "--format", fmt])


def _scripted_model(monkeypatch, loaded):
    from engine.agents import backend as backends

    class _Engine:
        def stats(self):
            return {"counters": {}, "cpu_threads": None}

    def answering(qid, turn, messages):
        return submit("$120", "high")

    def engine_backend(model, engine_kwargs, settings, env):
        loaded.append(model)
        return _Engine(), settings.resolved(False), backends.ScriptedBackend(answering)

    monkeypatch.setattr(backends, "engine_backend", engine_backend)


@pytest.mark.parametrize("fmt", ["json", "human"])
def test_the_tau_table_is_a_run_start_line_and_json_stdout_stays_one_document(tmp_path, corpus, calibration,
                                                                             monkeypatch, fmt):
    loaded = []
    _scripted_model(monkeypatch, loaded)
    result = _invoke(tmp_path, corpus, calibration, [_fee()], fmt)
    assert result.exit_code == 0, (result.output, result.exception)
    assert loaded == ["default"]
    err = result.stderr.splitlines()
    first = next(i for i, line in enumerate(err) if line.startswith("gate auto: reliability on "))
    assert err[first] == f"gate auto: reliability on {calibration} (3 questions, committed submissions scored " \
                         "before the gate)"
    assert err[first + 2].startswith("  med   ρ 1.000  (2/2 committed") and err[first + 4] == TABLE_LINE
    loading = [i for i, line in enumerate(err) if "loading model default" in line]
    assert len(loading) == 1 and first < loading[0]  # the table first, then progress (stderr, in both formats)
    if fmt == "json":
        report = json.loads(result.stdout)  # nothing but the report on stdout
        assert report["episodes"] == 1
        assert TABLE_LINE not in result.stdout
    else:
        assert "score it: dossier eval" in result.stdout
    gate_table = json.loads((tmp_path / "out" / "run.json").read_text())["settings"]["gate_table"]
    assert gate_table["tau"] == "med" and [r["rho"] for r in gate_table["table"]] == [None, 1.0, 0.0]


def test_a_question_on_a_calibrated_document_is_refused_before_the_model_loads(tmp_path, corpus, calibration,
                                                                               monkeypatch):
    from engine.agents import backend as backends

    def no_model(*args):
        raise AssertionError("the model was loaded before the overlap check")

    monkeypatch.setattr(backends, "engine_backend", no_model)
    questions = [_fee(), q("t2"), q("t3"), _fee("t4")]
    result = _invoke(tmp_path, corpus, calibration, questions, "json")
    assert isinstance(result.exception, DossierError), result.exception
    message = str(result.exception)
    assert message.startswith(f"question t2 is about memo, which the calibration run {calibration} answered")
    assert "(and 1 more of this run's questions: t3)" in message
    assert "leave these questions out of --questions, or calibrate on a run over other documents" in message
    assert result.stdout == "" and TABLE_LINE not in result.stderr
    assert not (tmp_path / "out" / "run.json").exists()  # refused before the run directory was written
