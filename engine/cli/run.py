"""`dossier run`: run a document agent over every question of a benchmark, all episodes at once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import (KV_CACHE_GIB, CorpusOpt, DtypeOpt, FormatOpt, KvCacheOpt, OutputFormat,
                                QuantizationOpt, ThreadsOpt, emit_json, parse_threads)

__all__ = ["register"]


def _agent_names() -> tuple[str, ...]:
    from engine.agents.registry import agent_names

    return agent_names()


def run_cmd(
    questions: Annotated[Path, typer.Option(help="Canonical question file (JSONL).")],
    out: Annotated[Path, typer.Option(help="Run directory: run.json, predictions.jsonl, trajectories.jsonl.")],
    corpus: CorpusOpt = None,
    agent: Annotated[str, typer.Option(help="The agent (engine/agents/registry.py): " + ", ".join(_agent_names()) + ".")] = "bm25",
    model: Annotated[str, typer.Option(help="'default' (embedded SmolLM2-135M), qwen2.5-0.5b or qwen2.5-1.5b (the "
                                            "cpu-models extra), a local HF directory or a .gguf file.")] = "default",
    k: Annotated[int, typer.Option("-k", "--k", help="Pages per search.")] = 5,
    max_iterations: Annotated[int, typer.Option(help="Model turns per episode; the last must answer.")] = 10,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight at once.")] = 16,
    limit: Annotated[int | None, typer.Option(help="Only the first N questions.")] = None,
    page_chars: Annotated[int, typer.Option(help="Characters of page text shown per hit.")] = 1500,
    observe: Annotated[str, typer.Option(help="How hits are shown: image (rendered pages, vision models), text, or "
                                              "auto (image when the model takes images).")] = "auto",
    image_dpi: Annotated[int, typer.Option(help="DPI of page images shown to vision models.")] = 100,
    image_max_pixels: Annotated[int, typer.Option(help="Pixel cap of each page image.")] = 1_003_520,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens generated per turn.")] = 256,
    search_mode: Annotated[str, typer.Option(help="boolean (MADQA's query language) or bag (free text).")] = "boolean",
    rerank: Annotated[str, typer.Option(help="none, or late: rerank search hits by late interaction "
                                             "(needs `dossier index --late`).")] = "none",
    loop: Annotated[str, typer.Option(help="The search agent's loop: guided (a repeated query is answered with what "
                                           "it returned before; a search that finds nothing names the words no page "
                                           "holds and a shorter query that matches) or madqa (MADQA's loop "
                                           "exactly).")] = "madqa",
    structured: Annotated[bool, typer.Option(help="Constrain turns to the tool-call JSON schema.")] = True,
    temperature: Annotated[float, typer.Option(help="0 = greedy (the default); above 0, sampling with --seed.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Sampling seed: each turn's seed derives from it, the question and the "
                                           "step (greedy decoding ignores it).")] = 0,
    extract_iterations: Annotated[int, typer.Option(help="workflow: model turns of each per-document extraction "
                                                         "episode (the last must answer).")] = 4,
    adapter: Annotated[Path | None, typer.Option(help="A LoRA adapter directory (`dossier train queries`), merged "
                                                     "into the weights at load.")] = None,
    stop_rule: Annotated[Path | None, typer.Option(help="A learned stop rule (`dossier train stop`): forces the "
                                                       "answer when it predicts more searching won't help.")] = None,
    kv_cache_gib: KvCacheOpt = KV_CACHE_GIB,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "auto",
    dtype: DtypeOpt = "auto",
    quantization: QuantizationOpt = None,
    threads: ThreadsOpt = "auto",
    max_rounds: Annotated[int | None, typer.Option(help="qguide: T_max, policy turns per episode (several tool calls "
                                                        "in one turn are one round); the last must submit. Default 3, "
                                                        "or the largest budget of --max-rounds-sweep.")] = None,
    gate: Annotated[str, typer.Option(help="qguide: τ, low|med|high; a submission below it is verified against the "
                                           "observations, and becomes Unknown when unsupported.")] = "med",
    tools: Annotated[str, typer.Option(help="qguide: recovery tools offered: auto, or a comma-separated subset of "
                                            "text, visual, spatial, structure, lookup (leave-one-out ablation).")] = "auto",
    chunk_pages: Annotated[int, typer.Option(help="qguide: pages per chunk of a longer named document.")] = 4,
    chunk_overlap: Annotated[int, typer.Option(help="qguide: pages consecutive chunks share.")] = 1,
    max_rounds_sweep: Annotated[str, typer.Option(help="qguide: e.g. 1-6: also record the answer at each T_max, by "
                                                       "branching the T_max=6 run at each round.")] = "",
    ray: Annotated[str | None, typer.Option(help="Run on a Ray cluster: 'local' starts one on this machine, 'auto' joins "
                                                 "the one `ray start --head` made here, or HOST:PORT of its head. "
                                                 "Needs: pip install 'dossier[ray]'.")] = None,
    workers: Annotated[int, typer.Option(help="--ray: Ray workers, one engine each (1 CPU each); questions are "
                                              "sharded across them, every episode stays on its worker, and "
                                              "--concurrency is per worker.")] = 1,
    gpus_per_worker: Annotated[float, typer.Option(help="--ray: GPUs each worker reserves (0: CPU; 0.5: two engines "
                                                        "per GPU; the engine itself uses one device).")] = 0.0,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Run a document agent over every question; write predictions and trajectories, resumable.

    All episodes run at once through Dossier's engine (each keeps its KV cache across
    turns; prefills and decodes of all episodes are batched). The bm25 agent searches the
    corpus with MADQA's query language and answers with page citations; rag retrieves
    once with the question; oracle reads the gold pages (retrieval removed); closed-book
    sees no documents; qguide (Q-Guide) reads the question's document (or searches the
    collection) in rounds of parallel perception-tool calls and submits with a confidence
    that meets a gate. A killed run re-run with the same --out skips finished episodes.
    Then score it with `dossier eval RUN_DIR`.

    Example:
        $ dossier run --agent bm25 --questions demo/sample/questions.jsonl --corpus demo/corpus --out runs/bm25
        20 episodes in 179.5 s (401 episodes/h, 1.02 steps/s, 49.1 tok/s); finish: answered 17, max_iterations 3
        score it: dossier eval runs/bm25
    """
    settings_kwargs = dict(k=k, max_iterations=max_iterations, page_chars=page_chars, max_new_tokens=max_new_tokens,
                           observe=observe, image_dpi=image_dpi, image_max_pixels=image_max_pixels,
                           search_mode=search_mode, rerank=rerank, structured=structured, seed=seed,
                           temperature=temperature, extract_iterations=extract_iterations, loop=loop)
    from engine.agents.qguide.config import parse_sweep

    if max_rounds is None:  # the qguide options keep their defaults for the other agents
        max_rounds = max(parse_sweep(max_rounds_sweep), default=3)
    settings_kwargs.update(max_rounds=max_rounds, gate=gate, tools=tools, chunk_pages=chunk_pages,
                           chunk_overlap=chunk_overlap, max_rounds_sweep=max_rounds_sweep)
    engine_kwargs = dict(kv_cache_gib=kv_cache_gib, device=device, dtype=dtype, quantization=quantization,
                         cpu_threads=parse_threads(threads))
    if adapter is not None:
        engine_kwargs["lora"] = str(adapter.resolve())
    if stop_rule is not None:
        from engine.agents.stop_rule import StopRule

        StopRule.load(stop_rule)  # a bad file stops the run before the model loads
        settings_kwargs["stop_rule"] = str(stop_rule.resolve())
    from engine.agents.launch import start_run

    report = start_run(agent, model, questions, corpus, out, settings_kwargs, engine_kwargs, concurrency, limit,
                       show_progress=fmt is OutputFormat.human, ray=ray, workers=workers,
                       gpus_per_worker=gpus_per_worker, on_ray=_ray_launcher(ray))
    if fmt is OutputFormat.json:
        emit_json(report)
        return
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(report["finish_reasons"].items()))
    typer.echo(f"{report['episodes']} episodes in {report['seconds']} s ({report['episodes_per_hour']:.0f} episodes/h, "
               f"{report['steps_per_s']} steps/s, {report['generated_tok_per_s']} tok/s); finish: {reasons or '-'}"
               + (f"; {report['skipped']} already done" if report["skipped"] else ""))
    prefilled, cached = report["tokens_prefilled"], report["tokens_cached"]
    share = f" ({100 * cached / (prefilled + cached):.0f} %)" if prefilled + cached else ""
    threads = report.get("cpu_threads")
    threads_text = ""
    if threads:
        threads_text = (f"; CPU threads {threads['now']} of {threads['cores']}"
                        + (f", adapted {threads['changes']} times to other load" if threads["changes"] else ""))
    typer.echo(f"prompt tokens {prefilled:,} prefilled, {cached:,} from the KV cache{share}{threads_text}")
    cache = report.get("prefix_cache")
    if cache and cache["documents"]:
        typer.echo(f"extraction prefix: {cache['shared_prefix_tokens']:.0f} tokens shared by the documents of a question; "
                   f"{100 * cache['share_from_cache']:.1f}% of it read from the prefix cache for the "
                   f"{cache['documents']} documents after the first (lowest {100 * cache['min_share']:.1f}%)")
    typer.echo(f"score it: dossier eval {out}")


def _ray_launcher(ray: str | None):
    """engine.distributed's run_on_ray when --ray is given; Ray's code is not imported otherwise."""
    if ray is None:
        return None
    from engine.distributed.launch import run_on_ray

    return run_on_ray


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
