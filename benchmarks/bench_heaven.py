"""Retrieval quality and embedding bytes read: BM25, BM25 + late rerank, HEAVEN two-stage, exhaustive MaxSim.

Needs a corpus with `dossier index` and late-interaction embeddings (tools.late.build_late_index,
`dossier index --late minilm`), and a canonical question file. Prints one JSON document: per
system, page/document recall@k, MRR, mean fraction of the exhaustive MaxSim's embedding bytes
read, and ms per query. HEAVEN runs with the paper's stage sizes (200 -> 50) and with a page
budget (first_k + key_keep pages read) of `--budget` x the corpus's pages; BM25's candidates
are longer than the average page, so on FinanceBench 0.85% of the pages is ~1% of the bytes.

Usage (FinanceBench):
    dossier ingest ../shared/data/financebench/pdfs --corpus /tmp/fb && dossier index --corpus /tmp/fb
    dossier import financebench ../shared/data/financebench/financebench_open_source.jsonl --out /tmp/fb-q.jsonl
    .venv/bin/python benchmarks/bench_heaven.py --corpus /tmp/fb --questions /tmp/fb-q.jsonl [--build]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from tools.late import HeavenConfig, build_late_index
    from benchmarks.late_eval import evaluate_late

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--questions", required=True)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--build", action="store_true", help="build (or resume) the embeddings first")
    parser.add_argument("--no-exhaustive", action="store_true")
    parser.add_argument("--budget", type=float, default=0.0085, help="page budget of the small HEAVEN config")
    parser.add_argument("--skip-paper", action="store_true", help="only the budget config (and BM25)")
    args = parser.parse_args()
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if args.build:
        log(json.dumps(build_late_index(args.corpus, args.model, progress=lambda d, t: d % 512 == 0 and log(f"{d}/{t}"))))
    pages = len(json.loads((Path(args.corpus) / "index" / "pages.json").read_text())["pages"])
    budget = max(2, int(args.budget * pages))  # pages read by both passes together
    configs = {} if args.skip_paper else {"paper": HeavenConfig()}
    configs[f"budget{budget}"] = HeavenConfig(first_k=budget * 4 // 5, key_keep=max(1, budget // 5))
    depths = () if args.skip_paper else (50, 200)
    result = evaluate_late(args.corpus, args.questions, args.model, args.k, configs, rerank_depths=depths,
                           exhaustive=not args.no_exhaustive, limit=args.limit, log=log)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
