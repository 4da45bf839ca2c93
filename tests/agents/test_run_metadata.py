"""Resuming a run directory: the same options resume it, different ones are refused, new settings default."""

import json

import pytest

from engine.agents.settings import AgentSettings
from engine.agents.launch import check_run_resume as _check_resume
from engine.agents.launch import run_metadata as _metadata
from tools.errors import DossierError


def _meta(tmp_path, **settings):
    (tmp_path / "q.jsonl").touch()
    return _metadata(AgentSettings(**settings), "default", tmp_path / "q.jsonl", tmp_path, {})


def test_same_options_resume_and_different_ones_are_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps(_meta(tmp_path, k=5)))
    _check_resume(tmp_path / "run", _meta(tmp_path, k=5))
    with pytest.raises(DossierError, match="different settings"):
        _check_resume(tmp_path / "run", _meta(tmp_path, k=3))


def test_a_run_from_before_a_setting_existed_resumes_with_its_default(tmp_path):
    old = _meta(tmp_path)
    del old["settings"]["observe"]  # run.json written before `observe` was added
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps(old))
    _check_resume(tmp_path / "run", _meta(tmp_path))
    with pytest.raises(DossierError, match="different settings"):
        _check_resume(tmp_path / "run", _meta(tmp_path, observe="text"))
