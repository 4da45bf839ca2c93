"""Entry point for the kill -9 test: a scripted run in its own process.

    python -m tests.agents.run_scripted CORPUS OUT N SECONDS_PER_STEP
"""

import sys
from pathlib import Path

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from tests.agents.scripted import questions, search_then_answer, slow

if __name__ == "__main__":
    corpus, out, n, delay = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    backend = ScriptedBackend(slow(search_then_answer, delay))
    summary = RolloutRunner(backend, AgentSettings(), AgentEnv(corpus), out, concurrency=2).run(questions(n))
    print(summary.episodes, summary.skipped)
