"""Starting a run: questions, corpus and model loaded, the run directory checked, every episode run.

`dossier run` parses its options into one `RunSpec` (engine/agents/run_spec.py) and calls `start_run`
with it; so do tests and the Ray test. The run
directory itself (run.json, resume checks, the summary) is `engine/agents/run_dir.py`'s. With
`ray` the episodes run on Ray actors through the `on_ray` the caller passes
(`engine.distributed.launch.run_on_ray`): agents build nothing on Ray, so this module never
imports it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from engine.agents.run_dir import check_resume, write_run_json, write_summary
from engine.agents.run_spec import RunSpec
from tools.progress import LiveProgress

__all__ = ["start_run", "run_metadata", "check_run_resume", "progress_callback", "RESUME_KEYS"]

RESUME_KEYS = ("agent", "model", "adapter", "questions", "corpus", "settings")  # what a resumed run must share


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_metadata(settings, model: str, questions: Path, corpus: Path | None, engine_config: dict) -> dict:
    """run.json of an agent run (CONTRIBUTING.md, "Run directories and trajectories")."""
    from importlib.metadata import version

    return {"agent": settings.agent, "model": model, "adapter": engine_config.get("lora"),
            "questions": str(questions.resolve()),
            "corpus": str(corpus.resolve()) if corpus else None, "settings": settings.to_json(),
            "seed": settings.seed, "engine": engine_config,
            # batch-invariant inference (docs/determinism.md) as asked; an agent run on one engine records what ran
            "deterministic": bool(engine_config.get("deterministic", False)),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "dossier_version": version("dossier")}


def _comparable(meta: dict) -> dict:
    """run.json as resuming compares it: the settings that matter to its agent (RunSettings' and its own).

    An old run.json gets the settings added since it was written at their defaults, except the
    loop: runs from before it existed ran MADQA's. Other agents' settings (recorded too) are left
    out, so a default changed in one agent does not stop another's runs from resuming.
    """
    from engine.agents.settings import AgentSettings, agent_keys

    if not isinstance(meta.get("settings"), dict):
        return meta
    agent = meta.get("agent", "bm25")
    defaults = AgentSettings(agent=agent).to_json() | {"loop": "madqa"}
    keys = agent_keys(agent)
    return meta | {"settings": {k: v for k, v in (defaults | meta["settings"]).items() if k in keys}}


def check_run_resume(out: Path, meta: dict) -> None:
    """A run directory may only be resumed with the same agent, model, questions, corpus and settings."""
    check_resume(out, _comparable(meta), RESUME_KEYS, "use another --out, or the same options to resume it",
                 _comparable)


def start_run(spec: RunSpec, show_progress: bool, echo: Callable[[str], None] = _stderr,
              on_ray: Callable[..., dict] | None = None) -> dict:
    """Load questions, model and corpus, run every episode of `spec`, and return the run summary.

    With `show_progress`, progress goes to stderr from the first moment (imports and model
    loading take minutes on a busy machine): a bar on a terminal, plain lines in a log.
    With `spec.placement` the episodes run on Ray workers, one engine each, run by `on_ray`
    (`engine.distributed.launch.run_on_ray`); without it Ray is never imported. `echo` gets one
    line per skipped question and per Ray message.
    """
    if spec.placement is not None and on_ray is None:
        raise ValueError("a RunSpec with a Ray placement needs on_ray=engine.distributed.launch.run_on_ray")
    with LiveProgress(f"run {spec.agent}") if show_progress else nullcontext() as live:
        if live is not None:
            live.phase("starting (imports, questions, corpus)")
        return _start_run(spec, live, echo, on_ray)


def _start_run(spec: RunSpec, live: LiveProgress | None, echo: Callable[[str], None], on_ray) -> dict:
    from engine.agents.backend import engine_backend
    from engine.agents.env import AgentEnv
    from engine.agents.registry import agent_spec
    from engine.agents.runner import RolloutRunner
    from engine.datasets import load_questions
    from tools.errors import DossierError

    settings, agent = spec.settings, agent_spec(spec.agent)
    items, errors = load_questions(spec.questions)
    for err in errors:
        echo(f"skipped {err}")
    if spec.limit is not None:
        items = items[:spec.limit]
    if not items:
        raise DossierError(f"{spec.questions} has no usable questions")
    for line in _agent_run_start(agent, settings, items):  # e.g. Q-Guide's --gate auto table
        echo(line)
    if agent.needs_corpus and spec.corpus is None:
        raise DossierError(f"agent {spec.agent!r} needs --corpus (a corpus built by `dossier ingest` and `dossier index`)")
    env = None
    if spec.corpus is not None:
        env = AgentEnv(spec.corpus, settings.page_chars, settings.search_mode, settings.rerank, settings.late_model)
    meta = run_metadata(settings, spec.model, spec.questions, spec.corpus, dict(spec.engine_options))
    meta |= agent.meta()  # e.g. the workflow's sandbox guarantees
    check_run_resume(spec.out, meta)
    if spec.placement is not None:
        return on_ray(spec, items, meta, live, echo)
    if live is not None:  # converting a GGUF on first use takes minutes: the log shows it is alive
        live.phase(f"loading model {spec.model}")
    engine, settings, backend = engine_backend(spec.model, spec.engine, settings, env)
    if hasattr(engine, "pool_line"):
        echo(engine.pool_line())  # how much conversation the pool holds, and where its size came from
    meta["observe"] = settings.observe  # what "auto" became for this model
    meta["quantization"] = getattr(getattr(engine, "config", None), "quantization", None)  # what "auto" became
    meta["deterministic"] = bool(getattr(getattr(engine, "runner", None), "deterministic", False))  # what ran
    write_run_json(spec.out, meta)
    progress = progress_callback(live, len(items))
    summary = RolloutRunner(backend, settings, env, spec.out, spec.concurrency, progress=progress).run(items)
    stats = engine.stats()
    counters = stats["counters"] | ({"first_turns": stats["first_turns"]} if "first_turns" in stats else {})
    report = summary.to_json() | {"questions": len(items), "out": str(spec.out), "engine": counters,
                                  "cpu_threads": stats.get("cpu_threads")}
    report |= agent.report(spec.out, engine)  # e.g. the workflow's prefix-cache share
    return write_summary(spec.out, report)


def _agent_run_start(spec, settings, items) -> list[str]:
    """The agent's own run-start check and lines (`run_start(settings, questions)` on its settings class).

    Called once the questions are known and before the corpus or the model loads, so a question the
    agent refuses stops the run in seconds.
    """
    cls = spec.settings_class()
    run_start = getattr(cls, "run_start", None) if cls is not None else None
    return list(run_start(settings, items)) if run_start is not None else []


def progress_callback(live: LiveProgress | None, total: int):
    """The runner's progress(summary, total) callback updating `live`, or None without progress."""
    if live is None:
        return None
    live.phase("episodes")
    live.update(done=0, total=total)

    def progress(summary, total):
        seconds = max(summary.seconds, 1e-9)
        # the engine's own counts when the backend has them: they include the turns still running
        generated = summary.tokens_generated if summary.live_generated is None else summary.live_generated
        prefilled = summary.tokens_prefilled if summary.live_prefilled is None else summary.live_prefilled
        live.update(done=summary.episodes + summary.skipped, total=total,
                    detail=f"{summary.steps / seconds:.2f} steps/s, {generated / seconds:.1f} tok/s "
                           f"generated, {prefilled / seconds:.0f} tok/s prefilled{kv_reuse(summary)}")

    return progress


KV_SHORT = 0.9  # below this share of earlier turns served from the cache, the progress line says why it is slow


def kv_reuse(summary) -> str:
    """`, KV reuse 99.8%` for the progress line, with what to do when turns keep recomputing their history.

    A pool too small for the episodes in flight evicts an idle episode's KV while it waits for its
    tool, and its next turn prefills the whole conversation again: the run slows many-fold with
    nothing else to show for it.
    """
    if not summary.history_tokens:
        return ""
    share = summary.history_cached / summary.history_tokens
    hint = " (the KV pool is too small for the episodes in flight: raise --kv-cache-gib or lower --concurrency)"
    return f", KV reuse {100 * share:.1f}%" + (hint if share < KV_SHORT else "")
