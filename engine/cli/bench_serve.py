"""`dossier bench serve`: concurrent MADQA-style agent clients against `dossier serve`, llama.cpp's server and
`transformers serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import (DTYPE, MODEL, QUANTIZATION, SPECULATIVE_TOKENS, DtypeOpt, FormatOpt, ModelOpt,
                                OutputFormat, PrefillFirstOpt, QuantizationOpt, corpus_opt, emit_json, kv_cache_opt,
                                parse_threads, pip_extra, threads_opt)

__all__ = ["register_bench"]

# The shared options with this benchmark's own defaults, and why (the documented workload pins them).
ThreadsEachOpt = threads_opt("auto gives dossier serve its own default and each peer every core this process may "
                             "use (llama.cpp takes no 'auto'); a number fixes every server's threads (dossier serve's "
                             "idle threads then sleep at once rather than spin ~0.1 ms).")
KvCacheEachOpt = kv_cache_opt("1 GiB here, not 2: the documented workload's, the same for every server (the "
                              "transformers peer gets as many KV blocks).")
BenchCorpusOpt = corpus_opt("An indexed one (default: the sample suite, built in a temporary folder).")


def bench_serve(
    model: ModelOpt = MODEL,
    clients: Annotated[int, typer.Option(help="Concurrent client threads (episodes in flight).")] = 8,
    episodes: Annotated[int, typer.Option(help="Episodes per server (questions cycled).")] = 16,
    max_iterations: Annotated[int, typer.Option(help="Model calls per episode at most (the last answers); 4 here, not "
                                                     "`dossier run`'s 10, to keep the documented workload short.")] = 4,
    k: Annotated[int, typer.Option("-k", "--k", help="Pages per search; 3 here, not `dossier run`'s 5, as the "
                                                     "documented workload.")] = 3,
    page_chars: Annotated[int, typer.Option(help="Characters of page text per hit; 500 here, not `dossier run`'s "
                                                 "1500, as the documented workload.")] = 500,
    max_tokens: Annotated[int, typer.Option(help="Tokens per reply (the OpenAI request's max_tokens).")] = 48,
    threads: ThreadsEachOpt = "auto",
    kv_cache_gib: KvCacheEachOpt = 1.0,
    peers: Annotated[str | None, typer.Option(
        "--peers", "--servers",
        help="Comma-separated servers, run in this order: dossier, llamacpp (llama.cpp's server; "
             + pip_extra("bench-peers") + "), llamacpp-ngram (the same, drafting as many tokens as "
             "--speculative-tokens by its own n-gram lookup), transformers. Default: dossier,llamacpp,llamacpp-ngram "
             "(without llamacpp-ngram at --speculative-tokens 0): llama.cpp with and without drafts, as either can be "
             "the stronger peer.")] = None,
    orders: Annotated[str, typer.Option(help="given: the --peers order; both: that order, then reversed (each "
                                             "printed).")] = "given",
    dtype: DtypeOpt = DTYPE,
    quantization: QuantizationOpt = QUANTIZATION,
    deterministic: Annotated[bool, typer.Option(
        "--deterministic/--no-deterministic",
        help="Run dossier serve in the batch-invariant mode (off by default, as `dossier serve`; its cost: "
             "docs/determinism.md).")] = False,
    speculative_tokens: Annotated[int, typer.Option(
        "--speculative-tokens", min=0,
        help="dossier serve's draft tokens per step (guessed from each conversation's own history; 0: none); the "
             "llamacpp-ngram peer drafts as many by llama.cpp's own n-gram lookup (ngram-simple, n = 3).")
    ] = SPECULATIVE_TOKENS,
    prefill_first: PrefillFirstOpt = False,
    mode: Annotated[str, typer.Option(help="text: the agent's JSON turn in plain text (every server); tools: MADQA's "
                                           "OpenAI tools (dossier and llamacpp: transformers serve ignores "
                                           "tool_choice).")] = "text",
    corpus: BenchCorpusOpt = None,
    questions: Annotated[Path | None, typer.Option(help="Questions of --corpus (canonical JSONL).")] = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """The same agent clients over HTTP against dossier serve and its peers, one server at a time.

    Each client runs BM25-agent episodes that re-send the whole conversation every turn (as
    MADQA's harness does); every server loads the same model (llama.cpp: the same GGUF file,
    natively quantised) with the same threads and greedy decoding, llama.cpp with one slot per
    client and its prompt cache. Prints episodes/hour, time to first token, request latency, the
    fraction of prompt tokens served from cache, and Dossier's ratio to each peer. A peer that
    cannot start gets a row saying why. The defaults are the run to quote; the README's table was
    made with --orders both.

    Example (SmolLM2 at the defaults, bf16, on a 2-core AMD EPYC Zen 5, nothing else running, commit c7f3a25;
    llama.cpp with and without its own n-gram drafts, the stronger of the two being the ratio to quote):
        $ dossier bench serve --orders both
        order server             episodes  wall s episodes/h  TTFT p50  TTFT p90 request s  cached
        1     dossier serve            16     6.0     9673.2     0.11s     0.19s     0.63s   0.857
        1     llama.cpp server         16    27.4     2100.2     0.34s     0.84s     3.06s   0.821
        1     llama.cpp + n-gram       16    29.1     1982.2     0.67s     1.33s     3.25s   0.821
        2     llama.cpp + n-gram       16    28.1     2053.1     0.78s     1.76s     3.18s   0.813
        2     llama.cpp server         16    27.6     2090.9     0.35s     0.82s     3.09s   0.821
        2     dossier serve            16     5.7    10148.7     0.12s     0.21s     0.60s   0.857
        dossier / llama.cpp server (order 1): episodes/h 4.61x, TTFT p50 0.32x, same turns 8/16
        dossier / llama.cpp + n-gram (order 1): episodes/h 4.88x, TTFT p50 0.17x, same turns 7/16
        dossier / llama.cpp + n-gram (order 2): episodes/h 4.94x, TTFT p50 0.16x, same turns 6/16
        dossier / llama.cpp server (order 2): episodes/h 4.85x, TTFT p50 0.35x, same turns 6/16
    """
    threads_each = parse_threads(threads)  # None: dossier serve's default, the peers every core
    from benchmarks.serve_bench import ServeWorkload, run_serve_benchmark
    from tools.errors import DossierError

    if peers is None:
        peers = "dossier,llamacpp,llamacpp-ngram" if speculative_tokens else "dossier,llamacpp"
    chosen = tuple(s.strip() for s in peers.split(",") if s.strip())
    if not chosen or set(chosen) - {"dossier", "llamacpp", "llamacpp-ngram", "transformers"} \
            or len(set(chosen)) < len(chosen):
        raise DossierError(f"--peers takes dossier, llamacpp, llamacpp-ngram and/or transformers, each once "
                           f"(got {peers!r})")
    if "llamacpp-ngram" in chosen and not speculative_tokens:
        raise DossierError("--peers llamacpp-ngram drafts as many tokens as --speculative-tokens, and 0 would make it "
                           "llamacpp: drop it, or give --speculative-tokens above 0")
    if mode not in ("text", "tools") or (mode == "tools" and "transformers" in chosen):
        raise DossierError(f"--mode {mode!r}: use text, or tools without transformers (transformers serve ignores "
                           "tool_choice and returns no tool calls for SmolLM2)")
    if orders not in ("given", "both"):
        raise DossierError(f"--orders takes given or both (got {orders!r})")
    if (corpus is None) != (questions is None):
        raise DossierError("give --corpus and --questions together (or neither, for the sample suite)")
    workload = ServeWorkload(clients, episodes, max_iterations, k, page_chars, max_tokens, threads_each, kv_cache_gib,
                             mode, dtype, quantization, deterministic, speculative_tokens, prefill_first)
    progress = None if fmt is OutputFormat.json else (lambda msg: typer.echo(f"… {msg}", err=True))
    result = run_serve_benchmark(model, workload, None if corpus is None else str(corpus),
                                 None if questions is None else str(questions), chosen, progress, orders=orders)
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    typer.echo(f"{'order':<5} {'server':<18} {'episodes':>8} {'wall s':>7} {'episodes/h':>10} {'TTFT p50':>9} "
               f"{'TTFT p90':>9} {'request s':>9} {'cached':>7}")

    def shown(value, unit: str = "s", digits: int = 2) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}{unit}"

    for row in result["rows"]:
        if row.get("error"):
            typer.echo(f"{row['order']:<5} {row['server']:<18} {row['error']}")
            continue
        typer.echo(f"{row['order']:<5} {row['server']:<18} {row['episodes']:>8} {row['wall_s']:>7.1f} "
                   f"{row['episodes_per_hour']:>10.1f} {shown(row['ttft_p50_s']):>9} {shown(row['ttft_p90_s']):>9} "
                   f"{shown(row['mean_request_s']):>9} {shown(row['cached_token_fraction'], '', 3):>7}")
        if row["episodes_failed"]:
            typer.echo(f"  {row['episodes_failed']} episodes failed; first: {row['first_error']}")
    for c in result["comparisons"]:
        ttft = "n/a" if c["ttft_p50_ratio"] is None else f"{c['ttft_p50_ratio']:.2f}x"
        typer.echo(f"dossier / {c['peer']} (order {c['order']}): episodes/h {c['episodes_per_hour_ratio']:.2f}x, "
                   f"TTFT p50 {ttft}, same turns {c['episodes_with_the_same_turns']}/{episodes}")


def register_bench(bench_app: typer.Typer) -> None:
    bench_app.command("serve")(bench_serve)
