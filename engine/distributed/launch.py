"""`dossier run --ray`: the same run on Ray workers, one engine each, writing the same run directory.

`engine.agents.launch.start_run` calls `run_on_ray` (passed as its `on_ray`) once the questions,
corpus and run.json check are done; progress and run_summary.json are the ones of a local run.
"""

from __future__ import annotations

from engine.agents.launch import progress_callback
from engine.agents.run_dir import write_run_json, write_summary

__all__ = ["run_on_ray"]


def run_on_ray(placement: tuple, model, engine_kwargs, settings, corpus, items, out, meta, concurrency, live,
               echo) -> dict:
    """The same run on Ray workers (engine/distributed/): the same run directory and progress."""
    from engine.distributed import RayRollout

    address, workers, gpus_per_worker = placement
    if live is not None:
        live.phase(f"starting {workers} Ray workers (each loads {model})")
    with RayRollout.start(address, workers, gpus_per_worker, model, engine_kwargs, settings, corpus, concurrency,
                          echo) as rollout:
        meta["observe"] = rollout.settings.observe
        write_run_json(out, meta)
        summary = rollout.run(items, out, progress_callback(live, len(items)))
        report = summary.to_json() | {"questions": len(items), "out": str(out), "engine": rollout.engine_counters(),
                                      "ray": rollout.report()}
    return write_summary(out, report)
