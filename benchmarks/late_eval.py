"""Retrieval quality and cost of BM25 alone, BM25 + late reranking, HEAVEN and exhaustive MaxSim.

Used by `benchmarks/bench_heaven.py`. For each question (its text is the query, as in
`dossier retrieval-eval`), every system ranks pages; page/document recall@k and MRR come from
`tools.search.metrics`, so the BM25 row equals `dossier retrieval-eval`'s. Costs: the mean
embedding bytes each system's MaxSim passes read, as a fraction of an exhaustive MaxSim's.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tools.late.heaven import HeavenConfig
from tools.late.rerank import LateReranker, bm25_first_stage

__all__ = ["evaluate_late"]


def evaluate_late(corpus: str | Path, questions: str | Path, model: str = "minilm", k: int = 5,
                  heaven: dict[str, HeavenConfig] | None = None, rerank_depths: tuple[int, ...] = (50,),
                  exhaustive: bool = True, limit: int | None = None,
                  log: Callable[[str], None] = print) -> dict:
    """Score every system on the questions; returns {"systems": {name: metrics + cost}, ...}.

    Args:
        corpus: corpus directory with `dossier index` and `--late MODEL` embeddings.
        questions: canonical question file (gold evidence pages).
        model: the late-interaction MODEL spec the embeddings were built with.
        k: pages each system returns.
        heaven: named HEAVEN configurations (default: the paper's 200/50, α 0.1, β 0.3).
        rerank_depths: one-pass full-MaxSim rerank of BM25's top n, for each n.
        exhaustive: also run full MaxSim over every page (slow: reads every embedding).
        limit: only the first `limit` questions.
    """
    from engine.datasets import load_questions
    from tools.search import Searcher
    from engine.eval.metrics.retrieval import aggregate

    items, _ = load_questions(questions)
    items = [q for q in items if q.evidence][:limit]
    searcher = Searcher(corpus)
    reranker = LateReranker.open(corpus, model)
    first = bm25_first_stage(searcher)
    heaven = heaven if heaven is not None else {"paper": HeavenConfig()}
    total_bytes = reranker.store.bytes_of(np.arange(reranker.store.num_pages))
    rows_of: dict[str, list] = {}
    cost: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}

    def record(name: str, qid: str, result_rows, gold, bytes_read: int, elapsed: float) -> None:
        pages = reranker.page_rows
        rows_of.setdefault(name, []).append((qid, [pages[r] for r in result_rows], gold))
        cost.setdefault(name, []).append(bytes_read / total_bytes)
        seconds[name] = seconds.get(name, 0.0) + elapsed

    for n, q in enumerate(items, start=1):
        gold = [(e.document, e.page) for e in q.evidence]
        start = time.perf_counter()
        encoded = reranker.encode(q.question)
        encode_s = time.perf_counter() - start
        start = time.perf_counter()
        rows, scores = first(q.question, k)
        record("bm25", q.id, rows.tolist(), gold, 0, time.perf_counter() - start)
        for depth in rerank_depths:
            start = time.perf_counter()
            rows, scores = first(q.question, depth)
            result = reranker.rerank(q.question, rows, scores, k, encoded=encoded)
            record(f"bm25+rerank@{depth}", q.id, result.rows.tolist(), gold, result.bytes_read,
                   time.perf_counter() - start + encode_s)
        for name, config in heaven.items():
            start = time.perf_counter()
            result = reranker.search(q.question, first, k, config=config, encoded=encoded)
            record(f"heaven[{name}]", q.id, result.rows.tolist(), gold, result.bytes_read,
                   time.perf_counter() - start + encode_s)
        if exhaustive:
            start = time.perf_counter()
            result = reranker.exhaustive(q.question, k, encoded=encoded)
            record("exhaustive_maxsim", q.id, result.rows.tolist(), gold, result.bytes_read,
                   time.perf_counter() - start + encode_s)
        if n % 10 == 0 or n == len(items):
            log(f"{n}/{len(items)} questions")
    systems = {}
    for name, rows in rows_of.items():
        scores = aggregate(rows).to_json(k)
        scores.update({"bytes_fraction_of_exhaustive": round(float(np.mean(cost[name])), 5),
                       "ms_per_query": round(1000 * seconds[name] / len(items), 1)})
        systems[name] = scores
    return {"corpus": str(corpus), "questions": len(items), "k": k, "model": model,
            "pages": reranker.store.num_pages, "embedding_bytes": int(total_bytes),
            "heaven_configs": {name: asdict(config) for name, config in heaven.items()},
            "systems": systems}
