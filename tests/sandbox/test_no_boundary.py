"""Where no kernel boundary is available, model-written code is refused with a message naming what to
install, unless the user says explicitly that the run is unsandboxed, and the run's files record it.
These run on every machine: the missing boundary is simulated."""

import pytest

import tools.sandbox.guarantees as guarantees
import tools.sandbox.run as sandbox_run
from tools.errors import DossierError
from tools.sandbox import SandboxLimits, run_python
from tools.sandbox.boundary import Boundary

MISSING = Boundary(False, "bubblewrap (bwrap) is not installed: install bubblewrap (apt-get install bubblewrap)")


@pytest.fixture()
def no_boundary(monkeypatch):
    import tools.sandbox.boundary as boundary

    monkeypatch.setattr(sandbox_run, "kernel_boundary", lambda: MISSING)
    monkeypatch.setattr(boundary, "kernel_boundary", lambda: MISSING)
    monkeypatch.setattr(guarantees, "kernel_boundary", lambda: MISSING)
    guarantees.sandbox_guarantees.cache_clear()
    yield
    guarantees.sandbox_guarantees.cache_clear()


def test_code_is_refused_without_a_kernel_boundary(no_boundary):
    result = run_python("print(1 + 1)")
    assert not result.ok and result.kind == "setup" and result.stdout == ""
    assert "bubblewrap" in result.error and "--allow-unsandboxed-code" in result.error and "\n" not in result.error


def test_an_explicitly_unsandboxed_run_goes_ahead_and_says_so(no_boundary):
    result = run_python("print(1 + 1)", limits=SandboxLimits(allow_unsandboxed=True))
    assert result.ok and result.stdout == "2\n"
    assert result.status["boundary"] == "none"
    first = guarantees.sandbox_guarantees()[0]
    assert first[:2] == ("kernel boundary", False) and "--allow-unsandboxed-code" in first[2]
    assert guarantees.run_meta()["sandbox"][0]["held"] is False  # what run.json records


@pytest.mark.parametrize("agent", ["workflow", "rlm"])
def test_code_running_agents_refuse_at_start_unless_allowed(no_boundary, agent):
    from engine.agents.registry import agent_spec
    from engine.agents.settings import AgentSettings

    check = agent_spec(agent).settings_class().check
    with pytest.raises(DossierError, match="no kernel sandbox.*apt-get install bubblewrap.*--allow-unsandboxed-code"):
        check(AgentSettings(agent=agent))
    check(AgentSettings(agent=agent, allow_unsandboxed_code=True))  # the user's explicit choice
    assert "sandbox" in agent_spec(agent).meta()  # run.json says what protected the run
