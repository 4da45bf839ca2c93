"""Search benchmark on a real PDF collection (FinanceBench by default), ours and peers in one run.

Prints:
  - ingest: our parallel ingest (text + words with boxes into SQLite) in pages/s, and the
    ratio to a peer: a single-process PyMuPDF loop that only extracts page text;
  - index build time;
  - search latency p50/p95 over the questions (free text) and over agent-style Boolean
    queries, next to bm25s's numba backend answering the same bag-of-words queries;
  - retrieval quality@k with our tokenization vs bm25s's default tokenizer (English
    stopwords), question text as the query: what our tokenization changes.

Usage:
    .venv/bin/python benchmarks/bench_search.py [--pdfs DIR] [--questions FILE] [--k 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared" / "data" / "financebench"


def _percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"p50_ms": round(1000 * statistics.median(ordered), 3),
            "p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 3), "n": len(ordered)}


def _peer_text_loop(pdfs: list[Path]) -> tuple[int, float]:
    import pymupdf

    start, pages = time.perf_counter(), 0
    for path in pdfs:
        with pymupdf.open(path) as doc:
            for page in doc:
                page.get_text("text")
                pages += 1
    return pages, time.perf_counter() - start


def _agent_queries(questions, rng: random.Random) -> list[str]:
    """Boolean queries like an agent writes: 2-3 content words, some as a phrase or with a wildcard."""
    from tools.search.tokenize import tokens

    out = []
    for q in questions:
        words = [w for w in tokens(q.question) if len(w) > 3 and not w.isdigit()] or tokens(q.question)
        years = [w for w in tokens(q.question) if w.isdigit() and len(w) == 4]
        pick = rng.sample(words, min(2, len(words)))
        query = f'"{pick[0]} {pick[1]}"' if len(pick) == 2 and rng.random() < 0.3 else " ".join(pick)
        if years:
            query += f" {years[0]}"
        if rng.random() < 0.2:
            query += f" OR {rng.choice(words)[:4]}*"
        out.append(query)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdfs", type=Path, default=SHARED / "pdfs")
    parser.add_argument("--questions", type=Path, default=SHARED / "financebench_open_source.jsonl")
    parser.add_argument("--benchmark", default="financebench", help="importer for --questions")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if not args.pdfs.is_dir():
        sys.exit(f"no PDFs at {args.pdfs}; pass --pdfs DIR (and --questions FILE)")

    import bm25s
    import numpy as np

    from engine.datasets.importers import import_questions
    from tools.corpus import CorpusStore, IngestConfig, ingest
    from tools.search import Searcher, build_index, tokens
    from engine.eval.metrics.retrieval import aggregate

    result: dict = {}
    pdfs = sorted(args.pdfs.glob("*.pdf"))
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        summary = ingest([args.pdfs], corpus, IngestConfig())
        peer_pages, peer_seconds = _peer_text_loop(pdfs)
        result["ingest"] = {"documents": summary.documents, "pages": summary.pages,
                            "pages_per_second": round(summary.pages_per_second, 1),
                            "peer_text_only_pages_per_second": round(peer_pages / peer_seconds, 1),
                            "ratio_vs_peer": round(summary.pages_per_second / (peer_pages / peer_seconds), 3)}
        store = CorpusStore(corpus)
        stats = build_index(store)
        result["index"] = {"seconds": round(stats["seconds"], 2), "vocabulary": stats["vocabulary"],
                           "tokens": stats["tokens"]}

        questions, _ = import_questions(args.benchmark, args.questions)
        searcher = Searcher(corpus)
        rows_ours, free_times = [], []
        searcher.search("warm up", k=args.k, mode="bag")
        for q in questions:
            start = time.perf_counter()
            hits = searcher.search(q.question, k=args.k, mode="bag", snippets=False)
            free_times.append(time.perf_counter() - start)
            rows_ours.append((q.id, [(h.document, h.page) for h in hits], [(e.document, e.page) for e in q.evidence]))
        boolean_times = []
        for query in _agent_queries(questions, random.Random(0)):
            start = time.perf_counter()
            searcher.search(query, k=args.k, snippets=False)
            boolean_times.append(time.perf_counter() - start)

        # Peer: bm25s out of the box (its tokenizer, English stopwords), numba backend.
        page_rows = searcher.index.page_rows
        texts = [store.page(d, p).text for d, p in page_rows]
        peer = bm25s.BM25(k1=1.5, b=0.75, method="lucene", backend="numba")
        peer.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
        peer_queries = bm25s.tokenize([q.question for q in questions], stopwords="en", show_progress=False)
        peer.retrieve(peer_queries, k=args.k, show_progress=False)  # JIT warm-up
        rows_peer, peer_times = [], []
        vocab_inv = {v: k for k, v in peer_queries.vocab.items()}
        for i, q in enumerate(questions):
            single = bm25s.tokenization.Tokenized(ids=[peer_queries.ids[i]], vocab=peer_queries.vocab)
            start = time.perf_counter()
            docs, _scores = peer.retrieve(single, k=args.k, show_progress=False, n_threads=1)
            peer_times.append(time.perf_counter() - start)
            rows_peer.append((q.id, [page_rows[j] for j in docs[0]], [(e.document, e.page) for e in q.evidence]))
        del vocab_inv
        # Score parity: bm25s indexing OUR tokens must give our scores for every page.
        same_tok = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        same_tok.index([tokens(t) for t in texts], show_progress=False)
        worst = 0.0
        for q in questions:
            query = [t for t in dict.fromkeys(tokens(q.question)) if t in same_tok.vocab_dict]
            expected = same_tok.get_scores(query) if query else np.zeros(len(texts))
            for hit in searcher.search(q.question, k=len(texts), mode="bag", snippets=False):
                worst = max(worst, abs(hit.score - float(expected[searcher.index.row_of[(hit.document, hit.page)]])))
        result["max_abs_score_diff_vs_bm25s_same_tokens"] = worst
        ours, theirs = aggregate(rows_ours), aggregate(rows_peer)
        result["search_latency"] = {"ours_free_text": _percentiles(free_times),
                                    "ours_boolean": _percentiles(boolean_times),
                                    "bm25s_numba_free_text": _percentiles(peer_times)}
        result["retrieval_at_k"] = {"k": args.k, "ours": ours.to_json(args.k), "bm25s_default": theirs.to_json(args.k)}
        changed = [(a["id"], a["page_hit"], b["page_hit"]) for a, b in zip(ours.per_question, theirs.per_question)
                   if a["page_hit"] != b["page_hit"] or a["doc_hit"] != b["doc_hit"]]
        result["questions_that_differ"] = [{"id": qid, "ours_page_hit": a, "bm25s_page_hit": b} for qid, a, b in changed]
        tok_examples = {q.question[:60]: {"ours": tokens(q.question)[:12]} for q in questions[:2]}
        result["tokenizer_example"] = tok_examples
    if args.json:
        print(json.dumps(result, indent=2))
        return
    ing = result["ingest"]
    print(f"ingest   {ing['documents']} docs, {ing['pages']} pages: {ing['pages_per_second']} pages/s "
          f"(peer text-only loop {ing['peer_text_only_pages_per_second']} pages/s, ratio {ing['ratio_vs_peer']})")
    print(f"index    {result['index']['seconds']} s, {result['index']['vocabulary']} words")
    lat = result["search_latency"]
    for name, row in lat.items():
        print(f"search   {name:<22} p50 {row['p50_ms']:.3f} ms  p95 {row['p95_ms']:.3f} ms  (n={row['n']})")
    for name, row in result["retrieval_at_k"].items():
        if name == "k":
            continue
        print(f"recall@{args.k} {name:<14} page_hit {row['page_hit']:.2f}  doc_hit {row['doc_hit']:.2f}  "
              f"page_recall {row['page_recall']:.3f}  mrr {row['mrr']:.3f}")
    print(f"questions whose hit changed between the tokenizations: {len(result['questions_that_differ'])}")
    print(f"max |our score - bm25s score| with the same tokens, all pages x all questions: "
          f"{result['max_abs_score_diff_vs_bm25s_same_tokens']:.2e}")


if __name__ == "__main__":
    main()
