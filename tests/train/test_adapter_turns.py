"""`--adapter-turns first`: the adapter writes each episode's first turn, the base model every later one,
on the tokens the conversation holds (tiny random Llama, a random non-zero LoRA, greedy, float32)."""

from types import SimpleNamespace

import pytest

from engine.agents.backend import EngineBackend, EnginePair, FirstTurnBackend, engine_backend
from engine.agents.settings import AgentSettings
from engine.core.config import EngineConfig
from tests.train.test_adapter import MESSAGES, _engine, _lora_folder

pytest.importorskip("peft", reason="the train extra (peft) is not installed; pip install -e .[dev] has it")

TURN = SimpleNamespace(schema=None, allow_search=True, max_new_tokens=12)


def _turn(backend, conversation):
    request = backend.submit(conversation, TURN, 0)
    while True:
        for ticket, output in backend.step():
            assert ticket is request and output.error is None
            return output


def test_the_adapter_writes_the_first_turn_and_the_base_model_the_rest(tiny_folder, tmp_path):
    folder, model = tiny_folder
    _lora_folder(folder, model, tmp_path / "adapter")
    wrap = lambda engine: EngineBackend(engine, 12, structured=False)  # noqa: E731
    base, tuned = (wrap(_engine(folder, dtype="float32", lora=lora)) for lora in (None, str(tmp_path / "adapter")))
    routed = FirstTurnBackend(wrap(_engine(folder, dtype="float32")),
                              wrap(_engine(folder, dtype="float32", lora=str(tmp_path / "adapter"))))
    observation = [("user", "Search results for: revenue\n\n[1] revenue was 7")]

    conversation = routed.open("q")
    routed.append(conversation, MESSAGES[:2])
    first = _turn(routed, conversation)
    routed.append(conversation, observation)
    second = _turn(routed, conversation)

    all_tuned = tuned.open("q")  # the adapter merged for every turn
    tuned.append(all_tuned, MESSAGES[:2])
    tuned_first = _turn(tuned, all_tuned)
    tuned.append(all_tuned, observation)
    tuned_second = _turn(tuned, all_tuned)
    base_only = base.open("q")
    base.append(base_only, MESSAGES[:2])
    base_first = _turn(base, base_only)
    assert first.token_ids == tuned_first.token_ids != base_first.token_ids  # the adapter wrote the first turn

    after = base.open("q")  # the base model continuing the adapter's first turn
    base.append(after, MESSAGES[:2])
    base.replay(after, {"token_ids": first.token_ids})
    base.append(after, observation)
    assert second.token_ids == _turn(base, after).token_ids != tuned_second.token_ids
    assert routed.fingerprint(conversation) == base.fingerprint(after)  # the same tokens, both turns included
    assert conversation.first is None and not routed._first  # the tuned session closed after its turn
    routed.close(conversation)


def test_a_run_with_adapter_turns_first_loads_both_engines_and_reports_both(tiny_folder, tmp_path):
    folder, model = tiny_folder
    _lora_folder(folder, model, tmp_path / "adapter")
    kwargs = dict(block_size=4, num_kv_blocks=256, dtype="float32", lora=str(tmp_path / "adapter"))
    engine, _settings, backend = engine_backend(str(folder), EngineConfig(**kwargs), AgentSettings(adapter_turns="first"),
                                                None)
    assert isinstance(backend, FirstTurnBackend) and isinstance(engine, EnginePair)
    conversation = backend.open("q")
    backend.append(conversation, MESSAGES[:2])
    first = _turn(backend, conversation)
    stats = engine.stats()
    assert stats["first_turns"]["tokens_generated"] == len(first.token_ids) == stats["counters"]["tokens_generated"]
    _engine_all, _, merged = engine_backend(str(folder), EngineConfig(**kwargs), AgentSettings(), None)
    assert isinstance(merged, EngineBackend)  # the default: the adapter merged into the one model


def test_dossier_run_with_adapter_turns_first_reports_the_tuned_engines_tokens(tiny_folder, tmp_path):
    import json

    from typer.testing import CliRunner

    from engine.cli.main import app

    folder, model = tiny_folder
    _lora_folder(folder, model, tmp_path / "adapter")
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "What was revenue?", "answers": [["7"]]}\n')
    result = CliRunner().invoke(app, ["run", "--agent", "closed-book", "--model", str(folder), "--questions",
                                      str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "run"), "--adapter",
                                      str(tmp_path / "adapter"), "--adapter-turns", "first", "--max-turn-tokens",
                                      "16", "--dtype", "float32", "--kv-cache-gib", "0.05"])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["engine"]["first_turns"]["tokens_generated"] == summary["engine"]["tokens_generated"] > 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["settings"]["adapter_turns"] == "first"
