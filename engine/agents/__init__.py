"""Document agents (MADQA's BM25 agent and baselines)."""

__all__: list[str] = []
