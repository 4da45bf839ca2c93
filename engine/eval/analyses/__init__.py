"""Analyses of a run beyond the per-item metrics: Q-Guide, workflow stages, budget curves, human baselines, steps."""

__all__: list[str] = []
