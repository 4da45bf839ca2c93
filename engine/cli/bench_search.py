"""`dossier bench bm25` and `dossier bench maxsim`: the search kernels against their peers.

`register_bench(bench_app)` adds the commands to the `dossier bench` Typer group (created in
`engine/cli/bench.py`). The workloads live in `benchmarks/workloads/` so the standalone scripts in
`benchmarks/` and this CLI run the same code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import FormatOpt, OutputFormat, emit_json, fixed_threads, threads_opt

__all__ = ["register_bench", "bench_bm25_cmd", "bench_maxsim_cmd"]


# --threads of the figure with several threads: a fixed number (the figure compares it with one thread).
FigureThreadsOpt = threads_opt("2 here, not auto, and a number only: the multi-thread figure's threads (the other "
                               "figure runs one).")


def _stderr(msg: str) -> None:
    typer.echo(msg, err=True)


def bench_bm25_cmd(
    docs: Annotated[int, typer.Option(help="Pages in the synthetic corpus.")] = 1_000_000,
    small_docs: Annotated[int, typer.Option(help="Pages in the small corpus of the scaling figure (0: skip).")] = 100_000,
    queries: Annotated[int, typer.Option(help="Queries timed per run.")] = 1000,
    k: Annotated[int, typer.Option("-k", "--k", help="Results per query.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the corpus and the queries.")] = 0,
    repeats: Annotated[int, typer.Option(help="Timed repeats; the best is kept.")] = 5,
    threads: FigureThreadsOpt = "2",
    cache_dir: Annotated[Path | None, typer.Option(help="Where synthetic indexes are cached.")] = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """BM25 top-k: our Numba kernel against bm25s's Numba backend on the same synthetic score matrix.

    The corpus (Zipf vocabulary, ~250 tokens a page) is built once (~1 min at 1M pages) and
    cached with its seed in the name. Queries are 3-5 mid-frequency words.

    Example:
        $ dossier bench bm25 --format json
        {"qps_ratio_vs_bm25s": 8.1, "topk_identical": true, "scaling_ratio_ours": 1.0, ...}
    """
    figure_threads = fixed_threads(threads, "bench bm25", "the multi-thread figure")
    from benchmarks.workloads.bm25_bench import run_bm25_bench

    result = run_bm25_bench(num_docs=docs, small_docs=small_docs, n_queries=queries, k=k, seed=seed,
                            repeats=repeats, threads=figure_threads, cache_dir=cache_dir, log=_stderr)
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    typer.echo(f"top-{k} over {docs:,} pages, {result['postings_per_query']:,.0f} postings/query, 1 thread: "
               f"ours {result['qps_ours']:,.0f} q/s, bm25s {result['qps_bm25s']:,.0f} q/s, "
               f"ratio {result['qps_ratio_vs_bm25s']}x; identical: {result['topk_identical']} "
               f"({result['topk_tie_only_queries']} differ only inside the k-th-place tie)")
    if small_docs:
        typer.echo(f"time per query {docs:,} vs {small_docs:,} pages: ours {result['scaling_ratio_ours']}x, "
                   f"bm25s {result['scaling_ratio_bm25s']}x")


def bench_maxsim_cmd(
    pages: Annotated[int, typer.Option(help="Pages scored per call.")] = 100,
    vectors: Annotated[int, typer.Option(help="Vectors per page.")] = 768,
    dim: Annotated[int, typer.Option(help="Vector dimension.")] = 128,
    query_vectors: Annotated[int, typer.Option(help="Query vectors.")] = 32,
    dtype: Annotated[str, typer.Option(help="Page storage (the vectors' dtype, not a model's): float32, float16, "
                                             "bfloat16 or int8.")] = "float16",
    repeats: Annotated[int, typer.Option(help="Timed calls; p50 is reported.")] = 30,
    seed: Annotated[int, typer.Option(help="Seed of the random vectors.")] = 0,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """MaxSim: our CPU kernel against colpali's einsum formula on the same page vectors.

    Example:
        $ dossier bench maxsim --format json
        {"p50_ms_ours": 9.8, "p50_ms_einsum": 31.0, "ratio_vs_einsum": 3.2, "max_rel_diff": 2e-07, ...}
    """
    from benchmarks.workloads.maxsim_bench import run_maxsim_bench

    result = run_maxsim_bench(pages=pages, vectors=vectors, dim=dim, query_vectors=query_vectors, dtype=dtype,
                              repeats=repeats, seed=seed)
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    typer.echo(f"MaxSim {query_vectors} x {pages} pages x {vectors} x {dim} ({dtype}): ours p50 "
               f"{result['p50_ms_ours']} ms, einsum p50 {result['p50_ms_einsum']} ms, "
               f"ratio {result['ratio_vs_einsum']}x, max rel diff {result['max_rel_diff']:.2g}")


def register_bench(bench_app: typer.Typer) -> None:
    """Add `bm25` and `maxsim` to the `dossier bench` group."""
    bench_app.command("bm25")(bench_bm25_cmd)
    bench_app.command("maxsim")(bench_maxsim_cmd)
