"""Per-agent settings: RunSettings plus each agent's own class, the CLI built from them, run.json kept whole."""

import json
from dataclasses import dataclass, fields

import pytest
from typer.testing import CliRunner

from engine.agents.launch import check_run_resume, run_metadata
from engine.agents.registry import AgentSpec, registered
from engine.agents.settings import AgentSettings, RunSettings, build_settings_class
from engine.agents.settings_fields import setting
from engine.cli.main import app
from tools.errors import DossierError


@dataclass(slots=True)
class ClashingSettings:
    loop: int = setting(3, "the same name as bm25's --loop, another type")


@dataclass(slots=True)
class SharingSettings:
    loop: str = setting("madqa", "bm25's --loop, shared")


def test_every_registered_agents_setting_is_a_field_and_two_agents_may_share_one_only_if_they_agree():
    names = {f.name for f in fields(AgentSettings)}
    for spec in registered():
        cls = spec.settings_class()
        assert cls is None or {f.name for f in fields(cls)} <= names
    assert {f.name for f in fields(RunSettings)} <= names
    tests = "tests.agents.test_agent_settings"
    shared = build_settings_class((*registered(), AgentSpec("share", "-", "x:y", settings=f"{tests}:SharingSettings")))
    assert shared(agent="bm25").loop == "madqa"
    with pytest.raises(DossierError, match="'loop' of agent 'clash' clashes with bm25"):
        build_settings_class((*registered(), AgentSpec("clash", "-", "x:y", settings=f"{tests}:ClashingSettings")))


def test_help_lists_each_agents_options_under_its_panel_and_the_turn_cap_under_both_names():
    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "220"}).output
    assert "Every agent" in shown and "--max-turn-tokens" in shown and "--max-new-tokens" in shown
    for spec in registered():
        cls = spec.settings_class()
        for f in fields(cls) if cls else ():
            if f.metadata.get("cli"):
                assert f"--agent {spec.name}" in shown and "--" + f.name.replace("_", "-") in shown


def test_an_option_of_another_agent_is_refused_naming_its_agent(tmp_path):
    (tmp_path / "q.jsonl").write_text("")
    result = CliRunner().invoke(app, ["run", "--questions", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "o"),
                                      "--agent", "closed-book", "--gate", "high"])
    assert isinstance(result.exception, DossierError)  # `dossier` prints it as one line
    assert "--gate is an option of --agent qguide; --agent closed-book does not use it" in str(result.exception)


def test_run_json_records_every_setting_and_a_run_whose_other_agents_defaults_moved_still_resumes(tmp_path):
    (tmp_path / "q.jsonl").touch()
    meta = run_metadata(AgentSettings(agent="bm25", max_new_tokens=512), "default", tmp_path / "q.jsonl", tmp_path, {})
    assert set(meta["settings"]) == {f.name for f in fields(AgentSettings)} and meta["settings"]["max_new_tokens"] == 512
    old = json.loads(json.dumps(meta))
    old["settings"]["max_rounds"] = 7  # a qguide setting: not this bm25 run's business
    del old["settings"]["inputs"]  # written before the direct agent existed
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps(old))
    check_run_resume(tmp_path / "run", meta)
    with pytest.raises(DossierError, match="different settings"):
        check_run_resume(tmp_path / "run", run_metadata(AgentSettings(agent="bm25"), "default", tmp_path / "q.jsonl",
                                                        tmp_path, {}))


def test_each_agent_checks_its_own_settings():
    with pytest.raises(DossierError, match="loop must be one of"):
        AgentSettings(agent="bm25", loop="spiral")
    AgentSettings(agent="closed-book", loop="spiral")  # not closed-book's setting: bm25's check does not run
    assert AgentSettings(agent="qguide", max_rounds=None, max_rounds_sweep="1-4").max_rounds == 4
    with pytest.raises(DossierError, match="turn-tokens must be at least 16"):
        AgentSettings(max_new_tokens=8)


# --- the turn cap (--max-turn-tokens) -------------------------------------------------------------------------------

def thinks_then_calls(qid, turn, messages):
    """A 'reasoning' policy: on turn 1 it thinks at length before its call; told it was cut, it calls at once."""
    if turn == 1:
        return "Let me think step by step about where revenue is reported. " * 3 + '{"tool": "search", "query": "revenue"}'
    return json.dumps({"tool": "answer", "answer": ["$48,250"], "citations": [{"document": "report", "page": 1}]})


def test_a_call_cut_mid_way_by_the_turn_cap_is_an_observation_saying_so(tmp_path):
    from engine.agents.backend import ScriptedBackend
    from engine.agents.env import AgentEnv
    from engine.agents.runner import RolloutRunner
    from tests.agents.scripted import build_corpus, questions

    backend = ScriptedBackend(thinks_then_calls, max_new_tokens=120)
    summary = RolloutRunner(backend, AgentSettings(max_new_tokens=120), AgentEnv(build_corpus(tmp_path / "c")),
                            tmp_path / "run").run(questions(1))
    assert summary.reasons == {"answered": 1}
    steps = json.loads((tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()[0])["steps"]
    assert steps[0]["tool_result"]["cut_by_turn_cap"] == 120 and "cut off by the turn cap (120 tokens)" in \
        steps[0]["tool_result"]["error"] and steps[0]["tokens"]["cut_by_turn_cap"] is True
    assert "cut off after 120 tokens" in steps[1]["input_delta"]
    # the same policy with room to think: no cut, the search runs
    roomy = ScriptedBackend(thinks_then_calls, max_new_tokens=1024)
    RolloutRunner(roomy, AgentSettings(max_new_tokens=1024), AgentEnv(tmp_path / "c"), tmp_path / "run2").run(questions(1))
    steps = json.loads((tmp_path / "run2" / "trajectories.jsonl").read_text().splitlines()[0])["steps"]
    assert steps[0]["tool_call"]["name"] == "search" and "pages" in steps[0]["tool_result"]


def test_max_turn_tokens_and_its_alias_reach_the_settings(tmp_path, monkeypatch):
    import engine.agents.launch as launch

    seen = []
    report = {"finish_reasons": {}, "episodes": 0}
    monkeypatch.setattr(launch, "start_run", lambda spec, **kw: seen.append(spec.settings_options) or report)
    for flag in ("--max-turn-tokens", "--max-new-tokens"):
        result = CliRunner().invoke(app, ["run", "--questions", "q.jsonl", "--out", str(tmp_path), "--agent",
                                          "closed-book", flag, "1024", "--format", "json"])
        assert result.exit_code == 0, result.output
    assert [s["max_new_tokens"] for s in seen] == [1024, 1024]
