"""`dossier bench bm25` / `maxsim` run end to end on small inputs (the group is mounted here as the CLI does)."""

import json

import pytest
import typer
from typer.testing import CliRunner

from engine.cli.bench_search import register_bench


def _app() -> typer.Typer:
    app = typer.Typer()
    bench = typer.Typer()
    register_bench(bench)
    app.add_typer(bench, name="bench")
    return app


@pytest.mark.slow  # compiles bm25s's numba retrieval (serial and parallel) and builds two corpora
def test_bench_bm25_json(tmp_path):
    result = CliRunner().invoke(_app(), ["bench", "bm25", "--docs", "4000", "--small-docs", "2000", "--queries", "40",
                                         "--repeats", "1", "--cache-dir", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["topk_identical"] is True and report["max_score_diff"] <= 1e-5
    assert report["qps_ratio_vs_bm25s"] > 0 and report["scaling_ratio_bm25s"] > 0


def test_bench_maxsim_json():
    result = CliRunner().invoke(_app(), ["bench", "maxsim", "--pages", "6", "--vectors", "64", "--repeats", "2",
                                         "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["max_rel_diff"] <= 1e-3 and report["pages"] == 6
