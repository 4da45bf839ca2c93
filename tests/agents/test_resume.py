"""A run killed and restarted with the same --out loses nothing that had finished, and replays the
turns of the episodes it stopped in the middle of."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agents.scripted import build_corpus, counted, episodes_without_times

ROOT = Path(__file__).resolve().parents[2]


def test_resume_after_kill_9_loses_nothing_finished(tmp_path):
    corpus = build_corpus(tmp_path / "c")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tests.agents.run_scripted", str(corpus), str(out), "30", "0.02"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    predictions = out / "predictions.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if predictions.exists() and predictions.read_text().count("\n") >= 6:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [json.loads(line)["id"] for line in predictions.read_text().splitlines() if line.strip()]
    assert 6 <= len(before) < 30, "the run finished before it could be killed"
    # simulate a line torn by the kill: the runner must repair it, not crash
    with predictions.open("a") as fh:
        fh.write('{"id": "q9", "answ')
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    episodes, skipped = map(int, done.stdout.split())
    assert skipped == len(before) and episodes == 30 - len(before)
    ids = [json.loads(line)["id"] for line in predictions.read_text().splitlines()]
    assert sorted(ids) == sorted(f"q{i}" for i in range(1, 31)) and len(ids) == 30
    assert ids[: len(before)] == before  # finished episodes were kept as they were
    traj_ids = [json.loads(line)["id"] for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(traj_ids) == sorted(ids)  # one trajectory per prediction, none from killed episodes


def three_searches_then_answer(qid: str, turn: int, messages) -> str:
    """Searches on turns 1-3, then an answer citing the last hit and naming the tool result's length."""
    if turn <= 3:
        return json.dumps({"tool": "search", "query": ("revenue", "revenue 2019", "capital expenditure")[turn - 1]})
    last = messages[-1][1]
    doc, page = last.split("File: ", 1)[1].split("\n", 1)[0].split(", Page: ")
    return json.dumps({"tool": "answer", "answer": [f"{qid} read {len(last)}"],
                       "citations": [{"document": doc, "page": page}]})


def test_a_run_killed_mid_episode_replays_its_finished_turns_and_ends_as_if_never_stopped(tmp_path):
    from engine.agents.backend import ScriptedBackend
    from engine.agents.env import AgentEnv
    from engine.agents.runner import RolloutRunner
    from engine.agents.settings import AgentSettings
    from tests.agents.scripted import questions

    corpus, items = build_corpus(tmp_path / "c"), questions(5)
    run = lambda policy, out: RolloutRunner(ScriptedBackend(policy), AgentSettings(), AgentEnv(corpus), out,  # noqa: E731
                                            concurrency=3).run(items)
    whole, first, rest = [], [], []
    run(counted(three_searches_then_answer, whole), tmp_path / "whole")
    assert len(whole) == 20  # 5 episodes of 4 turns
    # stopped with three episodes in flight and none finished: all nine turns would be lost
    with pytest.raises(KeyboardInterrupt):
        run(counted(three_searches_then_answer, first, stop_after=9), tmp_path / "cut")
    assert not (tmp_path / "cut/predictions.jsonl").exists() or not (tmp_path / "cut/predictions.jsonl").read_text()
    assert len((tmp_path / "cut/turns.jsonl").read_text().splitlines()) == 9
    summary = run(counted(three_searches_then_answer, rest), tmp_path / "cut")
    assert summary.replayed == 9 and summary.steps == 11 and summary.episodes == 5
    assert len(first) + len(rest) == len(whole) and not set(first) & set(rest)  # no turn written twice
    assert episodes_without_times(tmp_path / "cut") == episodes_without_times(tmp_path / "whole")
    assert not (tmp_path / "cut/turns.jsonl").exists()  # every episode finished: nothing left to replay


def test_a_recorded_turn_that_followed_another_conversation_is_generated_again(tmp_path, caplog):
    """When a tool's result changed since the turns were recorded, the episode replays up to there only."""
    from engine.agents.backend import ScriptedBackend
    from engine.agents.env import AgentEnv
    from engine.agents.runner import RolloutRunner
    from engine.agents.settings import AgentSettings
    from tests.agents.scripted import questions

    corpus, items = build_corpus(tmp_path / "c"), questions(5)
    run = lambda policy, out: RolloutRunner(ScriptedBackend(policy), AgentSettings(), AgentEnv(corpus), out,  # noqa: E731
                                            concurrency=3).run(items)
    whole, first, rest = [], [], []
    run(counted(three_searches_then_answer, whole), tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run(counted(three_searches_then_answer, first, stop_after=9), tmp_path / "cut")
    turns = tmp_path / "cut/turns.jsonl"
    records = [json.loads(line) for line in turns.read_text().splitlines()]
    for record in records:
        if record["episode"] == "q2" and record["turn"] == 1:
            record["history"] = "another conversation"
    turns.write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = run(counted(three_searches_then_answer, rest), tmp_path / "cut")
    assert summary.replayed == 7 and len(rest) == 11 + 2  # q2's turns 1 and 2 were written again
    assert ("q2", 2) in rest and ("q2", 3) in rest and ("q2", 1) not in rest
    assert "followed another conversation" in caplog.text
    assert episodes_without_times(tmp_path / "cut") == episodes_without_times(tmp_path / "whole")


def test_a_conversation_that_shows_page_images_has_a_fingerprint_that_follows_the_pixels():
    from PIL import Image

    from engine.agents.backend import ScriptedBackend

    backend = ScriptedBackend(lambda qid, turn, messages: "")
    prints = []
    for colour in ("white", "white", "black"):
        conversation = backend.open("q")
        backend.append(conversation, [("user", ["File: a, Page: 1", Image.new("RGB", (4, 4), colour)])])
        prints.append(backend.fingerprint(conversation))
    assert prints[0] == prints[1] != prints[2]
