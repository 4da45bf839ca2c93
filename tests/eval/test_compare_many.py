"""`dossier eval compare` with three or more systems: the system x system kappa and McNemar p matrices."""

import json

import pytest
from typer.testing import CliRunner

from engine.cli.main import app
from engine.eval.compare import compare_items, compare_many
from engine.eval.items import ItemResult

from .test_cli import gold_rows, prediction_rows, write_jsonl

runner = CliRunner()
RIGHT = {"a": set(range(6)), "b": {0, 1, 6}, "c": {6, 7, 8}}


def items(right, n=10):
    return [ItemResult.from_json({"id": f"q{i}", "correct": i in right}) for i in range(n)]


def test_matrices_by_hand():
    out = compare_many([(name, items(right)) for name, right in RIGHT.items()])
    kappa, p = out["kappa"], out["mcnemar_p"]
    assert out["systems"] == ["a", "b", "c"] and [kappa[i][i] for i in range(3)] == [1.0, 1.0, 1.0]
    # a~b: agree on 5 of 10, chance .6*.3 + .4*.7 = .46; discordant 4 and 1 -> p = 2 * 6/32
    assert kappa[0][1] == kappa[1][0] == pytest.approx((0.5 - 0.46) / 0.54)
    assert p[0][1] == pytest.approx(0.375)
    # a~c: agree on 1 (q9 both wrong), chance .6*.3 + .4*.7 = .46; discordant 6 and 3 -> p = 2 * 130/512
    assert kappa[0][2] == pytest.approx((0.1 - 0.46) / 0.54) and p[2][0] == pytest.approx(260 / 512)
    # b~c: agree on 6, chance .3*.3 + .7*.7 = .58; discordant 2 and 2 -> p = 1
    assert kappa[1][2] == pytest.approx((0.6 - 0.58) / 0.42) and p[1][2] == 1.0
    assert out["n_paired"] == [[10] * 3] * 3 and [a["accuracy"] for a in out["accuracy"]] == [0.6, 0.3, 0.3]
    pair = out["pairs"][0]
    assert (pair["a"], pair["b"]) == ("a", "b") and pair["only_a_correct"] == compare_items(
        items(RIGHT["a"]), items(RIGHT["b"]))["only_a_correct"] == 4


def test_pairs_use_their_shared_items():
    out = compare_many([("a", items(RIGHT["a"])), ("b", items(RIGHT["b"], n=4)), ("c", items(RIGHT["c"]))])
    assert out["n_paired"][0][1] == 4 and out["n_paired"][0][2] == 10


def _systems(tmp_path):
    gold = write_jsonl(tmp_path / "q.jsonl", gold_rows())
    paths = []
    for name, right in RIGHT.items():
        paths.append(str(write_jsonl(tmp_path / f"{name}.jsonl", prediction_rows(right))))
    return gold, paths


def test_cli_three_systems_prints_and_emits_the_matrices(tmp_path):
    gold, paths = _systems(tmp_path)
    human = runner.invoke(app, ["eval", "compare", *paths, "-g", str(gold)])
    assert human.exit_code == 0, human.output
    lines = human.output.splitlines()
    assert lines[0].startswith("accuracy: a 60.0%")
    header = lines.index(next(line for line in lines if line.startswith("Cohen's kappa")))
    assert lines[header + 1].split() == ["a", "1.000", "0.074", "-0.667"]
    assert any(line.split() == ["a", "1", "0.375", "0.508"] for line in lines)
    result = runner.invoke(app, ["eval", "compare", *paths, "-g", str(gold), "--format", "json"])
    out = json.loads(result.output)
    assert out["systems"] == ["a", "b", "c"] and out["kappa"][0][2] == pytest.approx(-2 / 3)
    assert len(out["pairs"]) == 3


def test_cli_two_systems_keep_the_pairwise_output(tmp_path):
    gold, paths = _systems(tmp_path)
    result = runner.invoke(app, ["eval", "compare", *paths[:2], "-g", str(gold)])
    assert "both correct 2 · only A 4 · only B 1 · both wrong 3" in result.output
    assert "Cohen's kappa =" in result.output and "McNemar exact p  " not in result.output


def test_cli_one_system_is_refused(tmp_path):
    gold, paths = _systems(tmp_path)
    result = runner.invoke(app, ["eval", "compare", paths[0], "-g", str(gold)])
    assert result.exit_code != 0 and "at least two systems" in str(result.exception)
