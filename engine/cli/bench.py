"""`dossier bench ...`: benchmarks that run ours and a peer on the same input and print the ratio.

`dossier bench engine` lives here. Other benchmark modules add their commands to the same
group: each exposes `register_bench(bench_app)` and is listed in `_EXTENSIONS` (one line).
"""

import importlib
import os
from typing import Annotated

import typer

from engine.cli.options import (ATTENTION, DTYPE, MAX_BATCHED_TOKENS, MODEL, THREADS, AttentionOpt, DtypeOpt, FormatOpt,
                                MaxBatchedTokensOpt, ModelOpt, OutputFormat, QuantizationOpt, ThreadsOpt, corpus_opt,
                                emit_json, kv_cache_opt, parse_quantization, parse_threads, set_threads)

__all__ = ["bench_app", "register"]

# Modules whose `register_bench(bench_app)` adds commands to this group.
_EXTENSIONS = ("engine.cli.bench_search", "engine.cli.bench_quant", "engine.cli.bench_serve")

bench_app = typer.Typer(
    name="bench",
    help="Benchmarks: ours and a peer on the same input, in one run, with the ratio.",
    no_args_is_help=True,
)

# The shared options with this benchmark's own default or use.
SessionsKvCacheOpt = kv_cache_opt("4 GiB here, not 2: the 32 default sessions keep their whole histories cached (the "
                                  "reuse this benchmark measures) also in float32, where 2 GiB of the default model "
                                  "would not hold them.")
ImagesCorpusOpt = corpus_opt("With --images: render pages of this corpus instead of synthetic pages.")


@bench_app.command("engine")
def bench_engine(
    model: ModelOpt = MODEL,
    sessions: Annotated[int, typer.Option(help="Concurrent agent sessions (episodes).")] = 32,
    turns: Annotated[int, typer.Option(help="Model calls per session.")] = 6,
    tool_tokens: Annotated[int, typer.Option(help="Tokens of tool output appended before each later turn.")] = 300,
    new_tokens: Annotated[int, typer.Option(help="Tokens generated per turn (fixed).")] = 30,
    naive_sessions: Annotated[
        int,
        typer.Option("--peer-sessions", "--naive-sessions",
                     help="Sessions the HF peers and the one-sequence ablation run (sequential, so their time is "
                     "linear in sessions and is scaled to all of them); 0 = all."),
    ] = 4,
    peers: Annotated[
        str,
        typer.Option(help="HF peers, comma-separated: naive (generate, batch 1, no cache), kv-cache (batch 1, each "
                     "session's cache kept), padded (batched, left-padded, no cache); 'none' for none."),
    ] = "naive,kv-cache,padded",
    padded_batch: Annotated[int, typer.Option(help="Sessions per generate call of the padded peer.")] = 4,
    ablations: Annotated[
        bool,
        typer.Option("--ablations/--no-ablations", help="Also run Dossier with one sequence per step and with "
                     "prefix caching off."),
    ] = True,
    threads: ThreadsOpt = THREADS,
    kv_cache_gib: SessionsKvCacheOpt = 4.0,
    max_batched_tokens: MaxBatchedTokensOpt = MAX_BATCHED_TOKENS,
    attention: AttentionOpt = ATTENTION,
    dtype: DtypeOpt = DTYPE,
    block_size: Annotated[int, typer.Option(help="Tokens per KV block (flash-attn needs a multiple of 256).")] = 16,
    quantization: QuantizationOpt = None,
    deterministic: Annotated[bool, typer.Option(
        "--deterministic/--no-deterministic",
        help="Run Dossier's engine in the batch-invariant mode (off by default; `python -m "
             "benchmarks.bench_deterministic` times both modes in one run: docs/determinism.md).")] = False,
    vllm: Annotated[bool, typer.Option("--vllm", help="Also run vLLM with prefix caching (GPU, vllm installed).")] = False,
    vllm_python: Annotated[
        str | None,
        typer.Option(help="Run vLLM (prefix caching) with this interpreter, in its own process and virtualenv, "
                     "on the same appended tokens (random-weight shapes, GPU)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Workload seed.")] = 0,
    images: Annotated[
        bool,
        typer.Option("--images", help="Each turn appends 3-5 page images (labelled File/Page, as the BM25 agent shows "
                     "hits) instead of tool text; needs a vision-language model, e.g. --model qwen2.5-vl-small."),
    ] = False,
    image_max_pixels: Annotated[int, typer.Option(help="With --images: pixel cap of each page as the model sees it "
                                                       "(by default 256 patches of 28x28, a fifth of `dossier run`'s "
                                                       "cap, as this benchmark's figures were measured).")] = 200_704,
    corpus: ImagesCorpusOpt = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Agent-like workload through Dossier's engine, three HF `generate` peers and Dossier's ablations.

    S sessions x T turns; each turn appends ~N tokens of tool output and generates a fixed
    number of tokens. Peers: (a) naive: batch 1, the whole history each turn; (b) kv-cache:
    batch 1, each session's cache kept between turns; (c) padded: sessions batched with left
    padding, the whole histories each turn. They run sessions (or batches) one after another,
    so by default they run 4 sessions and their time is scaled to all (`--peer-sessions 0`
    runs every session). Ablations: Dossier with one sequence per forward step, and with
    prefix caching off. Every row is printed; the headline ratio is against the fastest peer.
    Below, a small run on a loaded 2-core machine (load average 8-15; the last row ran alone
    after the others, at another load, so it is not comparable).

    Example:
        $ dossier bench engine --sessions 4 --turns 2 --tool-tokens 100 --new-tokens 10 --peer-sessions 2 \\
            --padded-batch 2 --threads 2
        system                                                              seconds  sessions  dossier speedup   match
        dossier (paged KV kept per session, prefix cache, continuous batch     50.3    4/4               1.00x   4/4
        hf naive (generate, batch 1, no cache)                                122.8    2/4               2.44x   2/2
        hf kv-cache (generate, batch 1, cache kept per session)                66.4    2/4               1.32x   2/2
        hf padded (generate, batched, left-padded, no cache)                  101.6    2/4               2.02x   2/2
        dossier, one sequence per forward step (no batching across session     72.6    2/4               1.44x   2/2
        dossier, prefix caching off (run after the main pass)                  26.9    4/4               0.54x   4/4
        speedup vs the strongest peer (kv_cache): 1.32x · cache reuse 0.997 · prefill 39.4 tok/s · decode 2.5 tok/s · ...

    With `--images` (a vision-language model), every turn shows 3-5 page images; the naive
    peer re-sends and re-encodes every image of the history each turn:
        $ dossier bench engine --images --model qwen2.5-vl-small --sessions 8 --turns 3
    """
    from benchmarks.engine_sessions import Workload, run_benchmark
    from engine.core.config import EngineConfig

    threads = parse_threads(threads)  # None: the engine adapts them to the load (and the peers keep torch's)
    if threads:
        set_threads(threads)
    config = EngineConfig(
        kv_cache_gib=kv_cache_gib, max_num_batched_tokens=max_batched_tokens, attention_backend=attention,
        dtype=dtype, block_size=block_size, quantization=parse_quantization(quantization), cpu_threads=threads,
        deterministic=deterministic,
    )
    progress = None if fmt is OutputFormat.json else (lambda msg: typer.echo(f"… {msg}", err=True))
    load_before = os.getloadavg()[0]
    if images:
        from dataclasses import replace

        from benchmarks.engine_images import ImageWorkload, run_image_benchmark

        config = replace(config, image_max_pixels=image_max_pixels)
        workload = ImageWorkload(sessions=sessions, turns=turns, new_tokens=new_tokens, seed=seed,
                                 corpus=None if corpus is None else str(corpus))
        result = run_image_benchmark(model, workload, config, naive_sessions=naive_sessions or None, progress=progress)
    else:
        workload = Workload(sessions=sessions, turns=turns, tool_tokens=tool_tokens, new_tokens=new_tokens, seed=seed)
        chosen = tuple(p.strip().replace("-", "_") for p in peers.split(",") if p.strip() and p.strip() != "none")
        result = run_benchmark(
            model, workload, config, naive_sessions=naive_sessions or None, with_vllm=vllm, progress=progress,
            peers=chosen, ablations=ablations, padded_batch=padded_batch,
            vllm_python=vllm_python,
        )
    result["load_average"] = {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)}
    result["numba_threads"] = _numba_threads()
    if fmt is OutputFormat.json:
        emit_json(result)
        return
    typer.echo(f"{'system':<66} {'seconds':>8} {'sessions':>9} {'dossier speedup':>16} {'match':>7}")
    for row in result["rows"]:
        typer.echo(f"{row['label'][:66]:<66} {row['seconds']:>8.1f} {row['sessions_measured']:>4}/{sessions:<4} "
                   f"{row['dossier_speedup']:>15.2f}x {row['sessions_matching_dossier']:>3}/{row['sessions_measured']:<3}")
    headline = (f"speedup vs the strongest peer ({result['strongest_peer']}): {result['speedup_vs_strongest_peer']:.2f}x · "
                if "strongest_peer" in result else "")
    typer.echo(
        f"{headline}cache reuse {result['cache_reuse_fraction']:.3f} · prefill {result['prefill_tok_s']} tok/s · "
        f"decode {result['decode_tok_s']} tok/s · outputs match: {'yes' if result['outputs_match'] else 'no'}"
    )
    if images:
        vision = result["vision"]
        typer.echo(
            f"pages shown {result['pages_shown']} · {result['image_tokens_per_page']} tokens/page · "
            f"images encoded: dossier {vision.get('images_encoded')} vs naive {result['naive_images_encoded']} "
            f"(naive on {result['naive_sessions_measured']} sessions)"
        )
    if "vllm" in result:
        typer.echo(f"vLLM: {result['vllm']}")
    if "ratio_vs_vllm" in result:
        typer.echo(f"vLLM (prefix caching) {result['vllm_s']:.1f} s · dossier/vLLM speed ratio {result['ratio_vs_vllm']:.2f}x")


def _numba_threads() -> int | None:
    try:
        import numba
    except ImportError:
        return None
    return numba.get_num_threads()


def register(app: typer.Typer) -> None:
    for name in _EXTENSIONS:
        importlib.import_module(name).register_bench(bench_app)
    app.add_typer(bench_app, name="bench")
