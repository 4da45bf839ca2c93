"""`dossier bench serve`: concurrent MADQA-style agent clients against `dossier serve` and `transformers serve`."""

from __future__ import annotations

from typing import Annotated

import typer

from engine.cli.chat import ModelOpt
from engine.cli.options import FormatOpt, OutputFormat, emit_json

__all__ = ["register_bench"]


def bench_serve(
    model: ModelOpt = "default",
    clients: Annotated[int, typer.Option(help="Concurrent client threads (episodes in flight).")] = 8,
    episodes: Annotated[int, typer.Option(help="Episodes per server (questions cycled).")] = 16,
    max_iterations: Annotated[int, typer.Option(help="Model calls per episode at most (the last answers).")] = 4,
    k: Annotated[int, typer.Option(help="Pages per search.")] = 3,
    page_chars: Annotated[int, typer.Option(help="Characters of page text per hit.")] = 500,
    max_tokens: Annotated[int, typer.Option(help="Tokens per reply.")] = 48,
    threads: Annotated[int, typer.Option(help="torch (and numba) threads of each server.")] = 2,
    kv_cache_gib: Annotated[float, typer.Option(help="KV memory of each server, GiB.")] = 1.0,
    servers: Annotated[str, typer.Option(help="Comma-separated: dossier, transformers.")] = "dossier,transformers",
    mode: Annotated[str, typer.Option(help="text: the agent's JSON turn in plain text (both servers); tools: MADQA's "
                                           "OpenAI tools (dossier only: transformers serve ignores tool_choice).")] = "text",
    corpus: Annotated[str | None, typer.Option(help="An indexed corpus (default: the sample suite, built in a temp folder).")] = None,
    questions: Annotated[str | None, typer.Option(help="Questions of --corpus (canonical JSONL).")] = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """The same agent clients over HTTP against dossier serve and transformers serve, one server at a time.

    Each client runs BM25-agent episodes that re-send the whole conversation every turn (as
    MADQA's harness does); both servers load the same weights with the same thread count,
    KV memory and greedy decoding. Prints episodes/hour, time to first token, request latency
    and the fraction of prompt tokens served from cache. Below, a small run on a loaded
    2-core machine (load average 13-16); the defaults are the run to quote.

    Example:
        $ dossier bench serve --clients 4 --episodes 4 --max-iterations 2 --max-tokens 32 --kv-cache-gib 0.5
        server               episodes  wall s episodes/h  TTFT p50  TTFT p90 request s  cached
        dossier serve               4   128.6      111.9    12.87s    13.04s    57.99s   0.856
        transformers serve          4   122.0      118.0     6.90s    13.98s    52.12s     n/a
        episodes/hour ratio 0.95x · episodes with the same turns on both: 4/4
    """
    from benchmarks.serve_bench import ServeWorkload, run_serve_benchmark
    from tools.errors import DossierError

    chosen = tuple(s.strip() for s in servers.split(",") if s.strip())
    if not chosen or set(chosen) - {"dossier", "transformers"}:
        raise DossierError(f"--servers takes dossier and/or transformers (got {servers!r})")
    if mode not in ("text", "tools") or (mode == "tools" and "transformers" in chosen):
        raise DossierError(f"--mode {mode!r}: use text, or tools with --servers dossier (transformers serve ignores "
                           "tool_choice and returns no tool calls for SmolLM2)")
    if (corpus is None) != (questions is None):
        raise DossierError("give --corpus and --questions together (or neither, for the sample suite)")
    workload = ServeWorkload(clients, episodes, max_iterations, k, page_chars, max_tokens, threads, kv_cache_gib, mode)
    progress = None if fmt is OutputFormat.json else (lambda msg: typer.echo(f"… {msg}", err=True))
    result = run_serve_benchmark(model, workload, corpus, questions, chosen, progress)
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    typer.echo(f"{'server':<20} {'episodes':>8} {'wall s':>7} {'episodes/h':>10} {'TTFT p50':>9} {'TTFT p90':>9} "
               f"{'request s':>9} {'cached':>7}")
    def shown(value, unit: str = "s", digits: int = 2) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}{unit}"

    for row in result["rows"]:
        typer.echo(f"{row['server']:<20} {row['episodes']:>8} {row['wall_s']:>7.1f} {row['episodes_per_hour']:>10.1f} "
                   f"{shown(row['ttft_p50_s']):>9} {shown(row['ttft_p90_s']):>9} {shown(row['mean_request_s']):>9} "
                   f"{shown(row['cached_token_fraction'], '', 3):>7}")
        if row["episodes_failed"]:
            typer.echo(f"  {row['episodes_failed']} episodes failed; first: {row['first_error']}")
    if "episodes_per_hour_ratio" in result:
        typer.echo(f"episodes/hour ratio {result['episodes_per_hour_ratio']:.2f}x · episodes with the same turns on "
                   f"both: {result['episodes_with_the_same_turns']}/{episodes}")


def register_bench(bench_app: typer.Typer) -> None:
    bench_app.command("serve")(bench_serve)
