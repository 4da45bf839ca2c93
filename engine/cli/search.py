"""`dossier index`, `dossier search` and `dossier retrieval-eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import CorpusOpt, FormatOpt, OutputFormat, emit_json

__all__ = ["register"]

KOpt = Annotated[int, typer.Option("-k", "--k", help="Number of pages to return.")]
ModeOpt = Annotated[str, typer.Option("--mode", help="boolean: the query language; bag: free text, words OR-ed.")]


def index_cmd(
    corpus: CorpusOpt,
    k1: Annotated[float, typer.Option(help="BM25 term-frequency saturation.")] = 1.5,
    b: Annotated[float, typer.Option(help="BM25 length normalisation.")] = 0.75,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Build the BM25 + positional index of a corpus (written to CORPUS/index, memory-mapped on load).

    Example:
        $ dossier index --corpus corpus
        indexed 7084 pages (45241 words, 2680542 tokens) in 4.9 s
    """
    from tools.corpus import CorpusStore
    from tools.search import BM25Params, build_index

    store = CorpusStore(corpus)
    params = BM25Params(k1=k1, b=b)
    if fmt is OutputFormat.json:
        stats = build_index(store, params)
        emit_json({k: round(v, 3) if isinstance(v, float) else v for k, v in stats.items()})
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from engine.cli.corpus import _stderr_console

    with Progress(TextColumn("index"), BarColumn(), MofNCompleteColumn(), TextColumn("pages"), TimeElapsedColumn(),
                  transient=True, console=_stderr_console()) as bar:
        task = bar.add_task("index", total=None)
        stats = build_index(store, params, lambda done, total: bar.update(task, completed=done, total=total))
    typer.echo(f"indexed {stats['pages']} pages ({stats['vocabulary']} words, {stats['tokens']} tokens) "
               f"in {stats['seconds']:.1f} s")


def search_cmd(
    corpus: CorpusOpt,
    query: Annotated[str, typer.Argument(help='Query, e.g. \'"net income" 2019 NOT forecast\' or \'rev* OR sales\'.')],
    k: KOpt = 5,
    document: Annotated[str | None, typer.Option(help="Only search this document (its id).")] = None,
    mode: ModeOpt = "boolean",
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Search pages with BM25 and the Whoosh query language MADQA's agents used.

    Terms are AND-ed by default; OR, NOT (upper case) and parentheses combine them;
    "quoted phrases" match words in order ("a b"~N allows N words between); * and ? are
    wildcards. Numbers match however they are written ($1,577.00 = 1577).

    Example:
        $ dossier search --corpus corpus '"capital expenditure" 2018' -k 2
        1. 3M_2018_10K p.60  score 7.41
           … Purchases of property, plant and equipment … **capital** **expenditure** …
    """
    from tools.search import Searcher

    searcher = Searcher(corpus)
    if searcher.stale:
        typer.secho("warning: the corpus changed since it was indexed; run `dossier index` to refresh", err=True,
                    fg=typer.colors.YELLOW)
    hits = searcher.search(query, k=k, document=document, mode=mode)
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
    from tools.search import Searcher
    from tools.search.metrics import aggregate

    items, errors = load_questions(questions)
    for err in errors:
        typer.echo(f"skipped {err}", err=True)
    searcher = Searcher(corpus)
    rows = []
    for q in items:
        hits = searcher.search(q.question, k=k, mode=mode, snippets=False)
        rows.append((q.id, [(h.document, h.page) for h in hits], [(e.document, e.page) for e in q.evidence]))
    scores = aggregate(rows)
    report = scores.to_json(k) | {"mode": mode, "skipped_lines": len(errors)}
    if fmt is OutputFormat.json:
        emit_json(report)
        return
    typer.echo(f"questions {scores.questions} (k={k}, mode={mode})"
               + (f"; {scores.skipped} without gold evidence skipped" if scores.skipped else ""))
    typer.echo("   ".join(f"{key} {report[key]:.3f}" for key in ("page_recall", "page_hit", "doc_recall", "doc_hit", "mrr")))


def register(app: typer.Typer) -> None:
    app.command("index")(index_cmd)
    app.command("search")(search_cmd)
    app.command("retrieval-eval")(retrieval_eval_cmd)
