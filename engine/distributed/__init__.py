"""Runs on a Ray cluster: one engine per worker, episodes sticky to their worker, nothing lost when one dies."""

from engine.distributed.rollout import RayRollout
from engine.distributed.worker import RolloutWorker

__all__ = ["RayRollout", "RolloutWorker"]
