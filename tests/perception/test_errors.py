"""Bad calls become error observations that say what was wrong, never exceptions."""

import pytest

from tools.perception import Observation, parse_region
from tools.errors import DossierError


@pytest.mark.parametrize("name, arguments, message", [
    ("text_recovery", {"document": "reprot", "page": 1}, "unknown document 'reprot'"),
    ("text_recovery", {"document": "report", "page": 7}, "page 7 does not exist in 'report' (it has 3 pages)"),
    ("text_recovery", {"document": "report", "page": 0}, "page must be >= 1, got 0"),
    ("visual_detail", {"document": "report", "page": 1, "region": [1.1, 0.2, 1.4, 0.5]},
     "region [1.1, 0.2, 1.4, 0.5] is outside the page"),
    ("visual_detail", {"document": "report", "page": 1, "region": [0.5, 0.2, 0.5, 0.6]}, "is empty"),
    ("text_recovery", {"document": "report", "page": 1, "region": "top half"}, "region 'top half' is not four numbers"),
    ("spatial_recovery", {"document": "report", "page": 1, "mode": "line"}, "mode 'line' needs line"),
    ("spatial_recovery", {"document": "report", "page": 1, "query": "--"}, "has no letters or digits"),
    ("structure_recovery", {"document": "report", "page": 1, "kind": "charts"}, "kind must be one of"),
    ("targeted_lookup", {"document": "report", "page": 1, "question": "x"}, "targeted_lookup needs a model"),
    ("magnify", {"document": "report", "page": 1}, "unknown tool 'magnify'"),
])
def test_bad_calls_return_error_observations(toolkit, name, arguments, message):
    obs = toolkit.call(name, arguments)
    assert isinstance(obs, Observation) and not obs.ok and obs.content is None
    assert message in obs.error, obs.error
    as_json = obs.to_json()
    assert as_json["error"] == obs.error and "content" not in as_json and as_json["tool"] == name


def test_arguments_that_are_not_an_object(toolkit):
    obs = toolkit.call("text_recovery", ["report", 1])
    assert not obs.ok and "arguments must be a JSON object" in obs.error


def test_a_bug_inside_a_tool_is_an_error_observation_not_a_crash(toolkit, monkeypatch):
    import tools.perception.toolkit as module

    def boom(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(module._TOOLS, "text_recovery", boom)
    obs = toolkit.call("text_recovery", {"document": "report", "page": 1})
    assert not obs.ok and obs.error == "internal error in text_recovery: ZeroDivisionError: division by zero"
    assert obs.document == "report" and obs.page == 1


def test_region_parsing():
    assert parse_region(None) == (0.0, 0.0, 1.0, 1.0)
    assert parse_region([0, 0, 1.0000001, 1]) == (0.0, 0.0, 1.0, 1.0)  # rounding at the edge is fine
    assert parse_region({"l": 0.1, "t": 0.2, "r": 0.3, "b": 0.4}) == (0.1, 0.2, 0.3, 0.4)
    with pytest.raises(DossierError, match="outside the page"):
        parse_region([-0.2, 0, 0.5, 0.5])
    with pytest.raises(DossierError, match="non-finite"):
        parse_region([0, 0, float("nan"), 1])


def test_observation_json_embeds_or_replaces_images(toolkit):
    obs = toolkit.call("visual_detail", {"document": "report", "page": 1, "region": [0, 0, 0.5, 0.2], "size": 128})
    assert obs.to_json(images="base64")["content"]["image"].startswith("data:image/png;base64,")
    assert "image" not in obs.to_json(images="drop")["content"]
    with pytest.raises(DossierError, match="images must be"):
        obs.to_json(images="inline")
