"""`dossier run --adapter / --stop-rule`: recorded in run.json, and a run resumes only with the same ones."""

import json

import pytest
from typer.testing import CliRunner

from engine.agents.settings import AgentSettings
from engine.cli.main import app
from engine.agents.launch import check_run_resume as _check_resume
from engine.agents.launch import run_metadata as _metadata
from tools.errors import DossierError


def test_the_adapter_and_stop_rule_are_part_of_a_runs_identity(tmp_path):
    (tmp_path / "q.jsonl").touch()
    def meta(lora=None, stop=None):
        return _metadata(AgentSettings(stop_rule=stop), "default", tmp_path / "q.jsonl", tmp_path,
                         {"lora": lora} if lora else {})

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps(meta("/a/adapter")))
    _check_resume(tmp_path / "run", meta("/a/adapter"))
    with pytest.raises(DossierError, match="different adapter"):
        _check_resume(tmp_path / "run", meta(None))
    with pytest.raises(DossierError, match="different adapter, settings"):
        _check_resume(tmp_path / "run", meta("/b/adapter", "/rule.json"))


def test_a_bad_stop_rule_stops_the_run_before_loading_anything(tmp_path):
    (tmp_path / "rule.json").write_text("not json")
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "x?"}\n')
    result = CliRunner().invoke(app, ["run", "--agent", "closed-book", "--questions", str(tmp_path / "q.jsonl"),
                                      "--out", str(tmp_path / "run"), "--stop-rule", str(tmp_path / "rule.json")])
    assert result.exit_code != 0 and "is not JSON" in str(result.exception)
    assert not (tmp_path / "run").exists()
