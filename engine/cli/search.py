"""`dossier index`, `dossier search` and `dossier retrieval-eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import CorpusOpt, FormatOpt, OutputFormat, StepProgress, emit_json

__all__ = ["register"]

KOpt = Annotated[int, typer.Option("-k", "--k", help="Number of pages to return.")]
ModeOpt = Annotated[str, typer.Option("--mode", help="boolean: the query language; bag: free text, words OR-ed.")]
RerankOpt = Annotated[str, typer.Option("--rerank", help="none, or late: HEAVEN-style late-interaction rerank "
                                                          "of the BM25 candidates (needs `dossier index --late`).")]
LateModelOpt = Annotated[str, typer.Option("--late-model", help="Late-interaction model: minilm or a "
                                                                "ColQwen/ColPali checkpoint directory.")]
LateDeviceOpt = Annotated[str, typer.Option("--late-device", help="Where the late-interaction encoder runs and, on "
                                                                  "cuda, where the page embeddings are scored (fused "
                                                                  "Triton MaxSim, when they fit): auto (the GPU when "
                                                                  "there is one), cpu or cuda.")]
Bm25DeviceOpt = Annotated[str, typer.Option("--device", help="Where BM25 is scored: cpu (numba, fastest one query at a "
                                                         "time), cuda (Triton kernels over a GPU copy of the index, "
                                                         "when it fits; else the CPU), or auto.")]
RetrieverOpt = Annotated[str, typer.Option("--retriever", help="default (our analyzer, BM25 k1=1.5) or "
                                                               "whoosh-compatible: MADQA's harness search (Whoosh's "
                                                               "StandardAnalyzer, query grouping, BM25F K1=1.2 "
                                                               "B=0.75); its index is built beside the default one "
                                                               "on first use.")]


def _late_device(device: str) -> str:
    """"auto": the GPU when torch sees one, else the CPU."""
    from tools.placement import resolve_device

    return resolve_device(device, "--late-device")


def _ranker(corpus: Path, rerank: str, late_model: str, late_device: str = "auto", device: str = "cpu",
            retriever: str = "default", backend: str = "auto"):
    """A function (query, k, document, mode, snippets) -> hits, with or without the late reranker."""
    from tools.errors import DossierError
    from tools.search import Searcher

    searcher = Searcher(corpus, device=device, retriever=retriever, backend=backend)
    if rerank == "none":
        return searcher, lambda q, k, doc, mode, snip: searcher.search(q, k=k, document=doc, mode=mode, snippets=snip)
    if rerank != "late":
        raise DossierError(f"--rerank {rerank!r} is not one of none, late")
    from tools.late import LateReranker, late_search_hits

    reranker = LateReranker.open(corpus, late_model, device=_late_device(late_device))
    return searcher, lambda q, k, doc, mode, snip: late_search_hits(searcher, reranker, q, k, mode=mode, document=doc,
                                                                    snippets=snip)


def index_cmd(
    corpus: CorpusOpt,
    k1: Annotated[float, typer.Option(help="BM25 term-frequency saturation.")] = 1.5,
    b: Annotated[float, typer.Option(help="BM25 length normalisation.")] = 0.75,
    late: Annotated[str | None, typer.Option(help="Also build late-interaction page embeddings with this model: "
                                                  "minilm, or a ColQwen/ColPali checkpoint directory.")] = None,
    late_dtype: Annotated[str, typer.Option(help="Storage of the late embeddings: int8 or float16.")] = "int8",
    late_device: LateDeviceOpt = "auto",
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Build the BM25 + positional index of a corpus (written to CORPUS/index, memory-mapped on load).

    With --late MODEL it also encodes every page into multi-vector embeddings (CORPUS/late/),
    used by `dossier search --rerank late`; an interrupted encoding resumes where it stopped.

    Example:
        $ dossier index --corpus corpus
        indexed 7084 pages (45241 words, 2680542 tokens) in 4.9 s
        $ dossier index --corpus corpus --late minilm
        indexed 14 pages (208 words, 346 tokens) in 0.0 s
        late embeddings (minilm, int8): 14 pages, 380 vectors, 0.1 MB in 0.6 s
    """
    from tools.corpus import CorpusStore
    from tools.search import BM25Params, build_index

    store = CorpusStore(corpus)
    params = BM25Params(k1=k1, b=b)
    if fmt is OutputFormat.json:
        stats = build_index(store, params)
        if late:
            from tools.late import build_late_index

            stats["late"] = build_late_index(corpus, late, dtype=late_dtype, device=_late_device(late_device))
        emit_json(stats)
        return
    with StepProgress("index", unit="pages") as progress:  # a bar on a terminal, plain lines in a log
        stats = build_index(store, params, lambda done, total: progress("pages", done, total))
    typer.echo(f"indexed {stats['pages']} pages ({stats['vocabulary']} words, {stats['tokens']} tokens) "
               f"in {stats['seconds']:.1f} s")
    if late:
        from tools.late import build_late_index

        with StepProgress(f"late {late}", unit="pages") as progress:
            info = build_late_index(corpus, late, dtype=late_dtype, device=_late_device(late_device),
                                    progress=lambda done, total: progress("pages", done, total))
        typer.echo(f"late embeddings ({info['encoder']}, {info['dtype']}): {info['pages']} pages, {info['vectors']} "
                   f"vectors, {info['bytes'] / 1e6:.1f} MB in {info['seconds']:.1f} s")


def search_cmd(
    corpus: CorpusOpt,
    query: Annotated[str, typer.Argument(help='Query, e.g. \'"net income" 2019 NOT forecast\' or \'rev* OR sales\'.')],
    k: KOpt = 5,
    document: Annotated[str | None, typer.Option(help="Only search this document (its id).")] = None,
    mode: ModeOpt = "boolean",
    rerank: RerankOpt = "none",
    late_model: LateModelOpt = "minilm",
    late_device: LateDeviceOpt = "auto",
    device: Bm25DeviceOpt = "cpu",
    retriever: RetrieverOpt = "default",
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Search pages with BM25 and the Whoosh query language MADQA's agents used.

    Terms are AND-ed by default; OR, NOT (upper case) and parentheses combine them;
    "quoted phrases" match words in order ("a b"~N allows N words between); * and ? are
    wildcards. Numbers match however they are written ($1,577.00 = 1577). --rerank late
    reranks the BM25 candidates by late interaction (HEAVEN's two stages).

    Example:
        $ dossier search --corpus corpus '"capital expenditure" 2018' -k 2
        1. 3M_2018_10K p.60  score 7.41
           … Purchases of property, plant and equipment … **capital** **expenditure** …
    """
    # One query per process: numpy's scoring (the same bits, tests/kernels/test_bm25.py) takes less than loading
    # numba and its compiled kernel from the cache (about 0.3 s), which pays back over an agent's many queries.
    backend = "reference" if device == "cpu" else "auto"
    searcher, rank = _ranker(corpus, rerank, late_model, late_device, device, retriever, backend)
    if searcher.stale:
        typer.secho("warning: the corpus changed since it was indexed; run `dossier index` to refresh", err=True,
                    fg=typer.colors.YELLOW)
    hits = rank(query, k, document, mode, True)
    if fmt is OutputFormat.json:
        emit_json([h.to_json() for h in hits])
        return
    if not hits:
        typer.echo("no pages match (try synonyms, OR, or a wildcard like revenue*)")
    for rank, hit in enumerate(hits, start=1):
        typer.echo(f"{rank}. {hit.document} p.{hit.page}  score {hit.score:.2f}")
        typer.echo(f"   {hit.snippet}")


def retrieval_eval_cmd(
    corpus: CorpusOpt,
    questions: Annotated[Path, typer.Option(help="Canonical question file (JSONL) with gold evidence pages.")],
    k: KOpt = 5,
    mode: ModeOpt = "bag",
    rerank: RerankOpt = "none",
    late_model: LateModelOpt = "minilm",
    late_device: LateDeviceOpt = "auto",
    device: Bm25DeviceOpt = "cpu",
    retriever: RetrieverOpt = "default",
    queries_from: Annotated[Path | None, typer.Option(help="Use each episode's first search query from this run "
                                                           "directory (in the run's search mode) instead of the "
                                                           "question text.")] = None,
    model: Annotated[str | None, typer.Option(help="Generate each question's first query with this model (the "
                                                   "bm25 agent's first turn) instead of using the question text.")] = None,
    adapter: Annotated[Path | None, typer.Option(help="With --model: the same with this LoRA adapter too, compared "
                                                      "question by question (McNemar).")] = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Measure retrieval: each question's text is the query; recall@k and MRR against gold pages.

    The default mode, bag, takes the question as free text (its words OR-ed, ranked by
    BM25, like bm25s with the question as query); an AND of a whole question's words would
    match almost nothing. page_recall averages |found gold pages| / |gold pages|;
    page_hit is the share of questions with at least one gold page in the top k.

    Example:
        $ dossier retrieval-eval --corpus corpus --questions q.jsonl
        questions 100 (k=5, mode=bag)
        page_recall 0.190   page_hit 0.200   doc_recall 0.740   doc_hit 0.740   mrr 0.125
    """
    from engine.datasets import load_questions
    from engine.eval.metrics.retrieval import aggregate

    items, errors = load_questions(questions)
    for err in errors:
        typer.echo(f"skipped {err}", err=True)
    _searcher, rank = _ranker(corpus, rerank, late_model, late_device, device, retriever)
    if queries_from is not None or model is not None or adapter is not None:
        from engine.train.first_query import compare_first_queries

        with StepProgress("retrieval-eval first queries") as progress:
            compared = compare_first_queries(corpus, items, k, rank, queries_from, model, adapter, progress)
        _print_first_queries(compared, k, fmt)
        return
    rows = []
    for q in items:
        hits = rank(q.question, k, None, mode, False)
        rows.append((q.id, [(h.document, h.page) for h in hits], [(e.document, e.page) for e in q.evidence]))
    scores = aggregate(rows)
    report = scores.to_json(k) | {"mode": mode, "rerank": rerank, "skipped_lines": len(errors)}
    if fmt is OutputFormat.json:
        emit_json(report)
        return
    typer.echo(f"questions {scores.questions} (k={k}, mode={mode}, rerank={rerank})"
               + (f"; {scores.skipped} without gold evidence skipped" if scores.skipped else ""))
    typer.echo("   ".join(f"{key} {report[key]:.3f}" for key in ("page_recall", "page_hit", "doc_recall", "doc_hit", "mrr")))


def _print_first_queries(report: dict, k: int, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.json:
        emit_json(report)
        return
    results, paired = report["systems"], report["paired"]
    for r in results:
        typer.echo(f"{r['system']}: questions {r['questions']} (k={k}, mode={r['mode']}; {r['without_query']} with no "
                   f"first query, {r['query_errors']} with a malformed one, counted as misses)")
        typer.echo(f"  page_hit {r['page_hit']:.3f} [{r['page_hit_ci'][0]:.3f}, {r['page_hit_ci'][1]:.3f}]   "
                   + "   ".join(f"{key} {r[key]:.3f}" for key in ("page_recall", "doc_hit", "mrr")))
    if paired:
        typer.echo(f"paired page hits: only first {paired['only_first']} · only second {paired['only_second']} · "
                   f"McNemar exact p = {paired['mcnemar_p']:.3g}")


def register(app: typer.Typer) -> None:
    app.command("index")(index_cmd)
    app.command("search")(search_cmd)
    app.command("retrieval-eval")(retrieval_eval_cmd)
