"""Benchmark `dossier eval` on 10,000 synthetic predictions (no LLM judge).

Run:  .venv/bin/python benchmarks/bench_eval.py [--n 10000] [--seed 0] [--format json]

Generates gold questions and predictions with a fixed seed (list answers, several variants,
near-miss spellings, string page numbers, multi-page evidence, tied efforts), then
1. times the real CLI end to end in a fresh process (`dossier eval PRED --gold Q --out DIR`,
   with the default 1,000 bootstrap resamples and the report files) against the 10 s target;
2. in this process, after one warm-up, times Dossier's `evaluate` against a straight
   transcription of MADQA's published formulas (tests/eval/madqa_reference.py) on the same
   items, and checks that accuracy, Page F1 and Doc F1 agree (string pages are converted to
   integers for the peer, whose harness would otherwise miss them).
Prints one comparable line and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.datasets.formats import load_predictions, load_questions  # noqa: E402
from engine.eval.evaluate import EvalConfig, evaluate  # noqa: E402
from tests.eval import madqa_reference  # noqa: E402

WORDS = ["revenue", "net income", "board", "alice smith", "$1,577", "2019", "chicago", "yes", "no", "q3",
         "total assets", "john doe", "42", "march 2020", "dividend", "acme corp", "seven", "audit committee"]


def _variant(rng: random.Random) -> list[str]:
    return [" ".join(rng.sample(WORDS, rng.randint(1, 3))) for _ in range(1 if rng.random() < 0.8 else 3)]


def _noisy(parts: list[str], rng: random.Random) -> list[str]:
    roll = rng.random()
    if roll < 0.45:
        return parts  # exact
    if roll < 0.6:
        return [p[:-1] + "x" if len(p) > 3 else p for p in parts]  # near miss
    if roll < 0.7:
        return parts + ["extra item"]
    if roll < 0.75:
        return ["I cannot find this information"]
    return [" ".join(rng.sample(WORDS, 2))]


def generate(n: int, seed: int, folder: Path) -> tuple[Path, Path]:
    """Write n gold questions and n predictions; returns (gold path, predictions path)."""
    rng = random.Random(seed)
    gold_path, pred_path = folder / "questions.jsonl", folder / "predictions.jsonl"
    with gold_path.open("w") as gold, pred_path.open("w") as pred:
        for i in range(n):
            variants = [_variant(rng) for _ in range(rng.randint(1, 3))]
            evidence = [{"document": f"doc{rng.randint(0, 800)}", "page": rng.randint(1, 40)}
                        for _ in range(1 if rng.random() < 0.83 else 2)]
            gold.write(json.dumps({"id": f"q{i}", "question": f"Question number {i}?", "answer_variants": variants,
                                   "evidence": evidence, "domain": rng.choice(["Financial", "Legal", "Reports"]),
                                   "document_category": rng.choice(["annual report", "contract", "form"])}) + "\n")
            answer = _noisy(rng.choice(variants), rng)
            cited = [dict(e) for e in evidence if rng.random() < 0.75]
            if rng.random() < 0.2:
                cited.append({"document": f"doc{rng.randint(0, 800)}", "page": rng.randint(1, 40)})
            for c in cited:
                if rng.random() < 0.2:
                    c["page"] = str(c["page"])  # string pages, as some harnesses write them
            pred.write(json.dumps({"id": f"q{i}", "question": f"Question number {i}?",
                                   "answer": answer[0] if len(answer) == 1 else answer, "citations": cited,
                                   "search_history": [f"query {k}" for k in range(rng.randint(1, 10))]}) + "\n")
    return gold_path, pred_path


def _peer_rows(gold_path: Path, pred_path: Path) -> tuple[list[dict], list[dict]]:
    questions = [json.loads(line) for line in gold_path.open()]
    predictions = [json.loads(line) for line in pred_path.open()]
    for p in predictions:  # give the peer integer pages so the comparison is about formulas, not parsing
        for c in p["citations"]:
            c["page"] = int(c["page"])
    return questions, predictions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=["human", "json"], default="human")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gold_path, pred_path = generate(args.n, args.seed, folder)
        dossier = str(Path(sys.executable).with_name("dossier"))
        command = [dossier, "eval", str(pred_path), "--gold", str(gold_path), "--out", str(folder / "out"),
                   "--format", "json"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        start = time.perf_counter()
        process = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        cli_s = time.perf_counter() - start
        cli_report = json.loads(process.stdout)

        questions, _ = load_questions(gold_path)
        predictions, _ = load_predictions(pred_path)
        evaluate(questions[:200], predictions[:200], config=EvalConfig(bootstrap=0))  # warm-up
        start = time.perf_counter()
        ours = evaluate(questions, predictions, config=EvalConfig(bootstrap=0)).report
        ours_s = time.perf_counter() - start
        peer_q, peer_p = _peer_rows(gold_path, pred_path)
        madqa_reference.evaluate(peer_q[:200], peer_p[:200])  # warm-up
        start = time.perf_counter()
        theirs = madqa_reference.evaluate(peer_q, peer_p)
        peer_s = time.perf_counter() - start

    agree = {key: abs(ours[key] - theirs[key]) < 1e-9 for key in ("accuracy", "page_f1", "doc_f1")}
    result = {
        "n": args.n, "cli_end_to_end_s": round(cli_s, 3), "target_s": 10.0, "within_target": cli_s < 10.0,
        "ours_in_process_s": round(ours_s, 3), "madqa_formulas_s": round(peer_s, 3),
        "speedup_vs_madqa_formulas": round(peer_s / ours_s, 2), "agree": agree,
        "accuracy": ours["accuracy"], "page_f1": ours["page_f1"], "doc_f1": ours["doc_f1"],
        "kuiper": ours["kuiper"], "kuiper_madqa_file_order": theirs["kuiper"],
        "cli_accuracy": cli_report["accuracy"], "kuiper_ci": cli_report["kuiper_ci"],
    }
    if args.format == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"dossier eval, {args.n} items: CLI end to end {cli_s:.2f} s (target < 10 s: "
          f"{'ok' if cli_s < 10 else 'MISSED'}) | in process: ours {ours_s:.2f} s vs MADQA formulas {peer_s:.2f} s "
          f"= {peer_s / ours_s:.2f}x | accuracy {ours['accuracy']:.4f}, Page F1 {ours['page_f1']:.4f}, "
          f"Doc F1 {ours['doc_f1']:.4f} equal to the peer: {all(agree.values())} | Kuiper {ours['kuiper']:.2f} "
          f"(ties collapsed) vs {theirs['kuiper']:.2f} (harness, file order)")


if __name__ == "__main__":
    main()
