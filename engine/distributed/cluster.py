"""Joining or starting the Ray cluster a distributed run or server uses; Ray is imported only here and below.

`--ray local` starts a cluster on this machine (stopped when the command ends), `--ray auto` joins
the one `ray start --head` made on this node (or RAY_ADDRESS), `--ray HOST:PORT` joins a head
node. A process that already called `ray.init` (a test, a notebook) keeps its own session.
"""

from __future__ import annotations

import dataclasses
import logging

from tools.errors import DossierError, missing_dependency

__all__ = ["import_ray", "connect", "check_resources", "start_workers", "stop_workers"]

log = logging.getLogger(__name__)


def import_ray():
    """The `ray` module, or an error naming the install command."""
    try:
        import ray
    except ImportError as err:
        raise missing_dependency("ray", "pip install 'dossier[ray]'") from err
    return ray


def connect(address: str) -> bool:
    """Join (or start, for 'local') the cluster; returns True when this call started the Ray session.

    Args:
        address: 'local', 'auto', HOST:PORT of a head node, or a ray:// client address.
    """
    ray = import_ray()
    if ray.is_initialized():
        log.info("using this process's Ray session (%s)", ray.get_runtime_context().gcs_address)
        return False
    if not address:
        raise DossierError("--ray needs a value: 'local', 'auto' or the HOST:PORT of a Ray head node")
    try:
        context = ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
    except ConnectionError as err:
        hint = ("start one with `ray start --head` (or use --ray local)" if address == "auto"
                else "check the head node is up (`ray status --address ADDRESS` on it) and reachable")
        raise DossierError(f"no Ray cluster at --ray {address!r}: {err}; {hint}") from err
    url = getattr(context, "dashboard_url", None)
    if url:
        log.warning("Ray dashboard: http://%s", url)
    return True


def check_resources(workers: int, cpus_per_worker: float, gpus_per_worker: float) -> None:
    """Refuse a placement the cluster can never satisfy (Ray would otherwise wait forever)."""
    ray = import_ray()
    total = ray.cluster_resources()
    for name, each in (("CPU", cpus_per_worker), ("GPU", gpus_per_worker)):
        need, have = workers * each, total.get(name, 0.0)
        if need > have + 1e-9:
            raise DossierError(f"--workers {workers} needs {need:g} {name}s ({each:g} each) but the Ray cluster has "
                               f"{have:g}; use fewer --workers, or add nodes with `ray start --address HEAD:PORT`")


def start_workers(worker_class, address: str, workers: int, cpus_per_worker: float, gpus_per_worker: float,
                  engine, make_args, **options) -> tuple[list, list[dict], bool]:
    """Join or start the cluster and start `workers` actors of `worker_class`, one engine each.

    Args:
        worker_class: a plain class (`RolloutWorker`, `ServeWorker`) with a `describe()` method.
        address: as for `connect`.
        engine: the `EngineConfig`; "auto" CPU threads become the worker's reserved CPUs
            (auto would count cores the other workers reserved).
        make_args: make_args(index, engine) -> the constructor's arguments for worker `index`.
        options: more Ray actor options (e.g. max_concurrency).

    Returns:
        (actor handles, their describe() answers, whether this call started the Ray session).
    """
    if workers < 1:
        raise DossierError(f"--workers must be at least 1 (got {workers})")
    if gpus_per_worker < 0:
        raise DossierError(f"--gpus-per-worker must be 0 or more (got {gpus_per_worker})")
    ray = import_ray()
    started = connect(address)
    try:
        check_resources(workers, cpus_per_worker, gpus_per_worker)
        threads = max(1, int(cpus_per_worker))
        if engine.cpu_threads is None:
            engine = dataclasses.replace(engine, cpu_threads=threads)
        env = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads), "NUMBA_NUM_THREADS": str(threads)}
        actor_class = ray.remote(worker_class).options(
            num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=0, scheduling_strategy="SPREAD",
            runtime_env={"env_vars": env}, **options)
        actors = [actor_class.remote(*make_args(i, engine)) for i in range(workers)]
        return actors, ray.get([actor.describe.remote() for actor in actors]), started
    except BaseException:
        if started:
            ray.shutdown()
        raise


def stop_workers(actors: list, started_session: bool) -> None:
    """Kill the worker actors, and shut Ray down when this command started the session (`connect` said so)."""
    ray = import_ray()
    for actor in actors:
        ray.kill(actor)
    if started_session:
        ray.shutdown()
