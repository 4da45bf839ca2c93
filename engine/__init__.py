"""Dossier's engine: inference engine, rollout runner, agents, evaluation and CLI."""

__all__: list[str] = []
