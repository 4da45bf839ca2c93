"""`dossier run --ray`: the same run on Ray workers, one engine each, writing the same run directory.

`engine.agents.launch.start_run` calls `run_on_ray` (passed as its `on_ray`) once the questions,
corpus and run.json check are done; progress and run_summary.json are the ones of a local run.
"""

from __future__ import annotations

from engine.agents.launch import progress_callback
from engine.agents.run_dir import write_run_json, write_summary

__all__ = ["run_on_ray"]


def run_on_ray(spec, items, meta, live, echo) -> dict:
    """The same run on Ray workers (engine/distributed/): the same run directory and progress.

    Args:
        spec: the run's `RunSpec`, its `placement` set.
        items: the questions to run; meta: run.json (written once the workers resolved the settings);
        live: the progress display (None: none); echo: prints a status line.
    """
    from engine.distributed import RayRollout

    placement = spec.placement
    if live is not None:
        live.phase(f"starting {placement.workers} Ray workers (each loads {spec.model})")
    with RayRollout.start(placement.address, placement.workers, placement.gpus_per_worker, spec.model, spec.engine,
                          spec.settings, spec.corpus, spec.concurrency, echo) as rollout:
        meta["observe"] = rollout.settings.observe
        write_run_json(spec.out, meta)
        summary = rollout.run(items, spec.out, progress_callback(live, len(items)))
        report = summary.to_json() | {"questions": len(items), "out": str(spec.out),
                                      "engine": rollout.engine_counters(), "ray": rollout.report()}
    return write_summary(spec.out, report)
