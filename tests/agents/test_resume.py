"""A run killed with SIGKILL and restarted with the same --out loses nothing that had finished."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.agents.scripted import build_corpus

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
