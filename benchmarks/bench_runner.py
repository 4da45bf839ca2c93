"""Rollout runner benchmark: all episodes at once vs one after another, same engine, model and questions.

Both sides run the BM25 agent with Dossier's engine on the same questions and settings;
the only difference is --concurrency (N vs 1). Greedy decoding, so both sides should
produce the same answers (batching can flip a near-tie in fp32; the script reports how
many predictions match). Prints episodes per hour for each, the ratio, and the tokens
served from cache.

Usage:
    .venv/bin/python benchmarks/bench_runner.py [--questions Q.jsonl --corpus DIR] [--n 12] [--concurrency 12]
With no --corpus it builds the sample suite (dossier sample) in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _sample_corpus(folder: Path) -> tuple[Path, Path]:
    from engine.datasets.sample import write_sample_suite
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import build_index

    info = write_sample_suite(folder / "sample")
    ingest([info["pdfs"]], folder / "corpus", IngestConfig(workers=1))
    build_index(CorpusStore(folder / "corpus"))
    return Path(info["questions"]), folder / "corpus"


def _run(engine, settings, env, questions, out: Path, concurrency: int) -> dict:
    from engine.agents.backend import EngineBackend
    from engine.agents.runner import RolloutRunner

    before = engine.counters.as_dict()
    backend = EngineBackend(engine, settings.max_new_tokens, settings.structured, env.documents)
    start = time.perf_counter()
    summary = RolloutRunner(backend, settings, env, out, concurrency=concurrency).run(questions)
    seconds = time.perf_counter() - start
    after = engine.counters.as_dict()
    delta = {k: after[k] - before[k] for k in ("tokens_prefilled", "tokens_cached", "tokens_generated",
                                                "history_tokens", "history_tokens_cached", "forward_steps")}
    return {"concurrency": concurrency, "episodes": summary.episodes, "seconds": round(seconds, 2),
            "episodes_per_hour": round(summary.episodes * 3600 / seconds, 1), "steps": summary.steps, **delta}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=Path)
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--model", default="default")
    parser.add_argument("--n", type=int, default=12, help="questions to run")
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--max-iterations", type=int, default=4)
    parser.add_argument("--page-chars", type=int, default=800)
    args = parser.parse_args()

    from engine.agents.env import AgentEnv
    from engine.agents.settings import AgentSettings
    from engine.datasets import load_questions
    from engine.core.llm_engine import Engine

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        questions_path, corpus = (args.questions, args.corpus) if args.corpus else _sample_corpus(tmp)
        questions, _ = load_questions(questions_path)
        questions = questions[: args.n]
        settings = AgentSettings(max_iterations=args.max_iterations, page_chars=args.page_chars)
        env = AgentEnv(corpus, settings.page_chars, settings.search_mode)
        engine = Engine.from_pretrained(args.model)
        # warm up (JIT, grammar compilation) outside the measurement
        _run(engine, settings, env, questions[:1], tmp / "warm", 1)
        concurrent = _run(engine, settings, env, questions, tmp / "concurrent", args.concurrency)
        sequential = _run(engine, settings, env, questions, tmp / "sequential", 1)
        preds = [sorted((tmp / side / "predictions.jsonl").read_text().splitlines()) for side in ("concurrent", "sequential")]
        strip = [[{k: v for k, v in json.loads(line).items() if k not in ("wall_s", "tokens")} for line in side]
                 for side in preds]
        same = sum(a == b for a, b in zip(*strip))
    result = {"questions": len(questions), "concurrent": concurrent, "sequential": sequential,
              "episodes_per_hour_ratio": round(concurrent["episodes_per_hour"] / sequential["episodes_per_hour"], 2),
              "predictions_identical": f"{same}/{len(questions)}"}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
