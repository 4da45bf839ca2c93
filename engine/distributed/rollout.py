"""The driver of a run on Ray: one worker actor per engine, balanced shards, episodes merged into one run directory.

Each worker gets every N-th pending question and streams finished episodes back; the
driver alone writes the run directory (trajectory, then prediction as the commit marker,
exactly like a local run), so a run is resumable with or without Ray and an episode is
never written twice. A worker that dies (its process killed, its node lost) has the
episodes it had not yet delivered re-run on the workers still alive; when none is left the
run stops with what finished on disk, and the same command resumes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from engine.agents.run_dir import commit_episode, finished_ids
from engine.agents.runner import RunSummary
from engine.distributed.cluster import import_ray, start_workers, stop_workers
from engine.distributed.corpus_check import corpus_facts, describe_placement
from engine.distributed.worker import RolloutWorker
from tools.errors import DossierError

__all__ = ["RayRollout"]

log = logging.getLogger(__name__)

_COUNTS = ("steps", "tokens_generated", "tokens_prefilled", "tokens_cached")


class RayRollout:
    """Worker actors of one run; use `RayRollout.start(...)` as a context manager, then `run(items, out)`."""

    def __init__(self, actors: list, infos: list[dict], started_session: bool, corpus_line: str):
        self.actors, self.infos = actors, infos
        self.settings = infos[0]["settings"]
        self.started_session, self.corpus_line = started_session, corpus_line
        self.alive = set(range(len(actors)))
        self.delivered = [0] * len(actors)  # episodes each worker delivered in this run
        self.lost: list[dict] = []  # workers that died: index, host, pid, error
        self.driver_busy_s = 0.0  # wall time the driver spent merging (not waiting on workers), last run
        self.driver_cpu_s = 0.0  # CPU time of the driver process (Ray's client threads included), last run

    @classmethod
    def start(cls, address: str, workers: int, gpus_per_worker: float, model: str, engine, settings,
              corpus: Path | None, concurrency: int, echo: Callable[[str], None] = print,
              cpus_per_worker: float = 1.0) -> RayRollout:
        """Connect to the cluster, start the workers (each loads the model) and check they see the corpus.

        Args:
            address: 'local', 'auto' or HOST:PORT (see `cluster.connect`).
            workers: worker actors, one engine each.
            gpus_per_worker: GPUs reserved by each worker (0 for CPU; fractions share a GPU).
            model, engine (an `EngineConfig`), settings, corpus, concurrency: as for a local run (concurrency per
                worker).
            echo: prints a status line for the user.
            cpus_per_worker: CPUs reserved by each worker (its torch and numba threads).
        """
        root = str(Path(corpus).resolve()) if corpus is not None else None
        echo(f"ray: starting {workers} workers (each loads {model})")
        actors, infos, started = start_workers(
            RolloutWorker, address, workers, cpus_per_worker, gpus_per_worker, engine,
            lambda i, config: (i, model, config, settings, root, concurrency))
        line, problems = describe_placement(corpus_facts(root), infos)
        hosts = sorted({info["host"] for info in infos})
        echo(f"ray: {workers} workers on {len(hosts)} node{'s' if len(hosts) > 1 else ''} ({', '.join(hosts)}), "
             f"devices {', '.join(sorted({info['device'] for info in infos}))}; {line}")
        rollout = cls(actors, infos, started, line)
        if problems:
            rollout.close()
            raise DossierError("; ".join(problems))
        return rollout

    def __enter__(self) -> RayRollout:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (and the cluster when this run started it)."""
        stop_workers(self.actors, self.started_session)

    def run(self, items: list, out: str | Path, progress: Callable[[RunSummary, int], None] | None = None
            ) -> RunSummary:
        """Run every question not yet in `out`'s predictions; returns the summary of this run.

        Args:
            items: the questions.
            out: the run directory (resumed when it holds finished episodes).
            progress: called as progress(summary, total) after each merged episode.
        """
        ray = import_ray()
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        done = finished_ids(out)
        todo = [q for q in items if q.id not in done]
        summary = RunSummary(skipped=len(items) - len(todo))
        start, cpu_start = time.perf_counter(), time.process_time()
        self.driver_busy_s = 0.0
        streams: dict = {}  # ObjectRefGenerator -> (worker index, {question id: Question} not yet delivered)
        self._assign(todo, streams)
        while streams:
            ready, _ = ray.wait(list(streams), num_returns=1, timeout=10.0)
            busy = time.perf_counter()
            for stream in ready:
                worker, owed = streams[stream]
                try:
                    event = ray.get(next(stream))
                except StopIteration:
                    del streams[stream]
                    assert not owed, f"worker {worker} ended its shard without {sorted(owed)}"
                    continue
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
                    self._worker_lost(worker, err, streams)
                    break  # `streams` changed: wait again
                qid = event["id"]
                if qid not in owed or qid in done:  # cannot happen: each pending id is owed to one stream
                    log.error("worker %d delivered %s twice; kept the first", worker, qid)
                    continue
                del owed[qid]
                commit_episode(out, event["trajectory"], event["prediction"])
                done.add(qid)
                self.delivered[worker] += 1
                summary.episodes += 1
                summary.reasons[event["reason"]] = summary.reasons.get(event["reason"], 0) + 1
                for name in _COUNTS:
                    setattr(summary, name, getattr(summary, name) + event["counts"][name])
                summary.seconds = time.perf_counter() - start
                if progress:
                    progress(summary, len(items))
            self.driver_busy_s += time.perf_counter() - busy
        summary.seconds = time.perf_counter() - start
        self.driver_cpu_s = time.process_time() - cpu_start
        return summary

    def _assign(self, questions: list, streams: dict) -> None:
        """Balanced shards (every N-th question) to the live workers, each a streaming call."""
        alive = sorted(self.alive)
        for slot, worker in enumerate(alive):
            shard = questions[slot::len(alive)]
            if shard:
                stream = self.actors[worker].run.remote(shard)
                streams[stream] = (worker, {q.id: q for q in shard})

    def _worker_lost(self, worker: int, err: Exception, streams: dict) -> None:
        """Re-run what a dead worker still owed on the others; stop if none is left."""
        self.alive.discard(worker)
        owed = []
        for stream, (owner, pending) in list(streams.items()):
            if owner == worker:
                owed.extend(pending.values())
                del streams[stream]
        info = self.infos[worker]
        self.lost.append({"worker": worker, "host": info["host"], "pid": info["pid"], "error": type(err).__name__})
        if not self.alive:
            raise DossierError(f"every Ray worker died (the last, worker {worker} on {info['host']}: "
                               f"{type(err).__name__}); {len(owed)} episodes unfinished, the finished ones are saved: "
                               "run the same command again to resume")
        log.warning("Ray worker %d on %s (pid %d) died (%s); re-running its %d unfinished episodes on %d other "
                    "worker(s)", worker, info["host"], info["pid"], type(err).__name__, len(owed), len(self.alive))
        self._assign(owed, streams)

    def engine_counters(self) -> dict:
        """The live workers' engine counters, summed."""
        ray = import_ray()
        total: dict = {}
        for counters in ray.get([self.actors[i].stats.remote() for i in sorted(self.alive)]):
            for name, value in counters.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    total[name] = total.get(name, 0) + value
        return total

    def report(self) -> dict:
        """Where the workers ran, what each delivered, which died, and how they reached the corpus."""
        workers = [{"worker": info["index"], "host": info["host"], "pid": info["pid"], "device": info["device"],
                    "episodes": self.delivered[i]} for i, info in enumerate(self.infos)]
        return {"workers": workers, "lost": self.lost, "corpus": self.corpus_line,
                "driver_busy_s": round(self.driver_busy_s, 4), "driver_cpu_s": round(self.driver_cpu_s, 4)}
