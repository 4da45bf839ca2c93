"""`dossier run`: run a document agent over every question of a benchmark, all episodes at once."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Annotated

import typer

from engine.cli.options import (DEVICE, DTYPE, GPU_MEMORY_UTILIZATION, KV_CACHE_GIB, MODEL, THREADS, CorpusOpt,
                                DeviceOpt, DtypeOpt, FormatOpt, GpuMemoryOpt, MaxModelLenOpt, KvCacheOpt, LimitOpt,
                                ModelOpt, OutputFormat, QUANTIZATION, QuantizationOpt, SPECULATIVE_TOKENS,
                                SpeculativeOpt, ThreadsOpt, emit_json, parse_quantization, parse_threads, pip_extra,
                                rich_escape)

__all__ = ["register"]


def _agent_names() -> tuple[str, ...]:
    from engine.agents.registry import agent_names

    return agent_names()


def _run_options(
    questions: Annotated[Path, typer.Option(help="Canonical question file (JSONL).")],
    out: Annotated[Path, typer.Option(help="Run directory: run.json, predictions.jsonl, trajectories.jsonl.")],
    corpus: CorpusOpt = None,
    agent: Annotated[str, typer.Option(help="The agent (engine/agents/registry.py): " + ", ".join(_agent_names()) + ".")] = "bm25",
    model: ModelOpt = MODEL,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight at once.")] = 16,
    limit: LimitOpt = None,
    adapter: Annotated[Path | None, typer.Option(help="A LoRA adapter directory (`dossier train queries`), merged "
                                                     "into the weights at load (see --adapter-turns).")] = None,
    stop_rule: Annotated[Path | None, typer.Option(help="A learned stop rule (`dossier train stop`): forces the "
                                                       "answer when it predicts more searching won't help.")] = None,
    kv_cache_gib: KvCacheOpt = KV_CACHE_GIB,
    gpu_memory_utilization: GpuMemoryOpt = GPU_MEMORY_UTILIZATION,
    max_model_len: MaxModelLenOpt = None,
    device: DeviceOpt = DEVICE,
    dtype: DtypeOpt = DTYPE,
    quantization: QuantizationOpt = QUANTIZATION,
    threads: ThreadsOpt = THREADS,
    speculative_tokens: SpeculativeOpt = SPECULATIVE_TOKENS,
    deterministic: Annotated[bool, typer.Option(
        "--deterministic/--no-deterministic",
        help="Batch-invariant inference (CPU; CUDA built but not yet run on a GPU): an episode's answers do not "
             "depend on --concurrency, chunking, the prefix cache or a resume, at a cost in speed "
             "(docs/determinism.md); recorded in run.json.")] = True,
    ray: Annotated[str | None, typer.Option(help="Run on a Ray cluster: 'local' starts one on this machine, 'auto' joins "
                                                 "the one `ray start --head` made here, or HOST:PORT of its head. "
                                                 "Needs: " + pip_extra("ray") + ".")] = None,
    workers: Annotated[int, typer.Option(help="--ray: Ray workers, one engine each (1 CPU each); questions are "
                                              "sharded across them, every episode stays on its worker, and "
                                              "--concurrency is per worker.")] = 1,
    gpus_per_worker: Annotated[float, typer.Option(help="--ray: GPUs each worker reserves (0: CPU; 0.5: two engines "
                                                        "per GPU; the engine itself uses one device).")] = 0.0,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """The options of `dossier run` that are not agent settings (the settings' options are built from them)."""


def _setting_options() -> list[tuple[str, str | None, inspect.Parameter]]:
    """(field, owning agent or None for every agent, parameter) of each agent setting with an option.

    RunSettings' fields come first (panel "Every agent"), then each registered agent's own
    (panel "--agent NAME"); a field two agents share is listed once, under the first.
    """
    from engine.agents.registry import registered
    from engine.agents.settings import RunSettings, setting_fields

    owners = [(None, RunSettings)] + [(spec.name, spec.settings_class()) for spec in registered()
                                      if spec.settings_class() is not None]
    seen, params = set(), []
    for owner, cls in owners:
        for name, hint, f in setting_fields(cls):
            if name in seen or not f.metadata.get("cli", False):
                continue
            seen.add(name)
            flags = f.metadata.get("flags") or ()  # none given: typer's (--name, --name/--no-name for a bool)
            default = f.metadata.get("cli_default", f.default)
            if default is None and hint is not type(None) and not _optional(hint):
                hint = hint | None
            panel = "Every agent" if owner is None else f"--agent {owner}"
            option = typer.Option(*flags, help=rich_escape(f.metadata["help"]), rich_help_panel=panel)
            params.append((name, owner, inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                                          annotation=Annotated[hint, option])))
    return params


def _optional(hint) -> bool:
    import types
    import typing

    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def run_cmd(**options) -> None:
    """Run a document agent over every question; write predictions and trajectories, resumable.

    All episodes run at once through Dossier's engine (each keeps its KV cache across
    turns; prefills and decodes of all episodes are batched). The agents (--agent):

    {agents}

    A killed run re-run with the same --out skips finished episodes.
    Then score it with `dossier eval RUN_DIR`.

    Example:
        $ dossier run --agent bm25 --questions demo/sample/questions.jsonl --corpus demo/corpus --out runs/bm25
        20 episodes in 179.5 s (401 episodes/h, 1.02 steps/s, 49.1 tok/s); finish: answered 17, max_iterations 3
        score it: dossier eval runs/bm25
    """
    defaults = {p.name: p.default for p in inspect.signature(_run_options, eval_str=True).parameters.values()}
    settings_kwargs, base = _split_options({**defaults, **options})
    questions, out, corpus, agent, model = (base[n] for n in ("questions", "out", "corpus", "agent", "model"))
    concurrency, limit, adapter, stop_rule, fmt = (base[n] for n in ("concurrency", "limit", "adapter", "stop_rule", "fmt"))
    kv_cache_gib, device, dtype, quantization, threads = (base[n] for n in ("kv_cache_gib", "device", "dtype",
                                                                            "quantization", "threads"))
    ray, workers, gpus_per_worker = base["ray"], base["workers"], base["gpus_per_worker"]
    engine_kwargs = dict(kv_cache_gib=kv_cache_gib, gpu_memory_utilization=base["gpu_memory_utilization"],
                         max_model_len=base["max_model_len"],
                         device=device, dtype=dtype, quantization=parse_quantization(quantization),
                         cpu_threads=parse_threads(threads), deterministic=base["deterministic"],
                         speculative_tokens=base["speculative_tokens"])
    if adapter is not None:
        engine_kwargs["lora"] = str(adapter.resolve())
    elif settings_kwargs.get("adapter_turns", "all") != "all":
        from tools.errors import DossierError

        raise DossierError(f"--adapter-turns {settings_kwargs['adapter_turns']} needs --adapter DIR (the LoRA "
                           "adapter to apply to those turns)")
    if stop_rule is not None:
        from engine.agents.stop_rule import StopRule

        StopRule.load(stop_rule)  # a bad file stops the run before the model loads
        settings_kwargs["stop_rule"] = str(stop_rule.resolve())
    from engine.agents.launch import start_run
    from engine.agents.run_spec import RayPlacement, RunSpec

    placement = None if ray is None else RayPlacement(ray, workers, gpus_per_worker)
    spec = RunSpec(agent, model, questions, out, corpus, settings_kwargs, engine_kwargs, concurrency, limit, placement)
    report = start_run(spec, show_progress=True, on_ray=_ray_launcher(ray))
    if fmt is OutputFormat.json:
        emit_json(report)
        return
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(report["finish_reasons"].items()))
    typer.echo(f"{report['episodes']} episodes in {report['seconds']} s ({report['episodes_per_hour']:.0f} episodes/h, "
               f"{report['steps_per_s']} steps/s, {report['generated_tok_per_s']} tok/s); finish: {reasons or '-'}"
               + (f"; {report['skipped']} already done" if report["skipped"] else "")
               + (f"; {report['turns_replayed']} turns of interrupted episodes replayed" if report.get("turns_replayed")
                  else ""))
    prefilled, cached = report["tokens_prefilled"], report["tokens_cached"]
    share = f" ({100 * cached / (prefilled + cached):.0f} %)" if prefilled + cached else ""
    threads = report.get("cpu_threads")
    threads_text = ""
    if threads:
        threads_text = (f"; CPU threads {threads['now']} of {threads['cores']}"
                        + (f", adapted {threads['changes']} times to other load" if threads["changes"] else ""))
    typer.echo(f"prompt tokens {prefilled:,} prefilled, {cached:,} from the KV cache{share}{threads_text}")
    engine_counts = report.get("engine") or {}
    if engine_counts.get("draft_tokens"):
        tried, kept = engine_counts["draft_tokens"], engine_counts["draft_tokens_accepted"]
        forced = engine_counts.get("draft_tokens_forced", 0)
        forced_text = f" ({forced:,} forced by a grammar)" if forced else ""
        typer.echo(f"draft tokens {tried:,} tried{forced_text}, {kept:,} kept ({100 * kept / tried:.0f} %; "
                   "--speculative-tokens)")
    cache = report.get("prefix_cache")
    if cache and cache["documents"]:
        typer.echo(f"extraction prefix: {cache['shared_prefix_tokens']:.0f} tokens shared by the documents of a question; "
                   f"{100 * cache['share_from_cache']:.1f}% of it read from the prefix cache for the "
                   f"{cache['documents']} documents after the first (lowest {100 * cache['min_share']:.1f}%)")
    typer.echo(f"score it: dossier eval {out}")


def _split_options(options: dict) -> tuple[dict, dict]:
    """(settings of the chosen agent's run, the other options); an option of another agent, given, is refused."""
    from engine.agents.settings import agent_keys
    from tools.errors import DossierError

    agent = options.get("agent", "bm25")
    settings = {}
    for name, owner, param in _setting_options():
        value = options.pop(name, param.default)
        if owner is None or owner == agent or name in agent_keys(agent):  # agent_keys: a field two agents share
            settings[name] = value
        elif value != param.default:
            flag = "--" + name.replace("_", "-")
            raise DossierError(f"{flag} is an option of --agent {owner}; --agent {agent} does not use it "
                               f"(see `dossier run --help`)")
    return settings, options


def _build_signature() -> inspect.Signature:
    base = inspect.signature(_run_options, eval_str=True)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in base.parameters.values()]
    return base.replace(parameters=params + [p for _, _, p in _setting_options()], return_annotation=None)


def _agents_help() -> str:
    """One line per registered agent, from the registry (its summary), for `dossier run --help`."""
    from engine.agents.registry import registered

    return "\n\n    ".join(f"{spec.name}: {spec.summary}" + ("" if spec.needs_corpus else " (no --corpus)")
                           for spec in registered())


def _ray_launcher(ray: str | None):
    """engine.distributed's run_on_ray when --ray is given; Ray's code is not imported otherwise."""
    if ray is None:
        return None
    from engine.distributed.launch import run_on_ray

    return run_on_ray


def register(app: typer.Typer) -> None:
    """Add `run`, its agent options built from the registered agents' settings classes (as registered now)."""

    @functools.wraps(run_cmd)
    def command(**options) -> None:
        run_cmd(**options)

    command.__doc__ = run_cmd.__doc__.replace("{agents}", _agents_help())
    command.__signature__ = _build_signature()  # typer reads the options from it and the hints below
    command.__annotations__ = {p.name: p.annotation for p in command.__signature__.parameters.values()}
    app.command("run")(command)
