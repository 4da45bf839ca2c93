"""`dossier bench engine` and `dossier chat` end to end (tiny models)."""

import json

from typer.testing import CliRunner

from engine.cli.main import app


def test_bench_engine_json_on_a_tiny_shape():
    result = CliRunner().invoke(
        app,
        ["bench", "engine", "--model", "llama-tiny", "--sessions", "3", "--turns", "3", "--tool-tokens", "40",
         "--new-tokens", "5", "--kv-cache-gib", "0.05", "--peers", "naive", "--no-ablations", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["outputs_match"] is True
    assert figures["cache_reuse_fraction"] > 0.9
    assert figures["counters"]["tokens_generated"] >= 3 * 3 * 5
    for key in ("speedup_vs_naive", "prefill_tok_s", "decode_tok_s", "dossier_s", "naive_s"):
        assert figures[key] is not None and figures[key] > 0, key


def test_chat_keeps_the_session_across_turns(tiny_llama):
    folder, _ = tiny_llama
    result = CliRunner().invoke(
        app, ["chat", "--model", str(folder), "--max-new-tokens", "4", "--device", "cpu"],
        input="hello there\nand again\n/exit\n",
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("assistant>") == 2
    costs = [line for line in result.output.splitlines() if "prefilled" in line]
    assert "cached 0" in costs[0] and "cached 0" not in costs[1]
