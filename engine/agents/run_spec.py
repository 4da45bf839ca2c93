"""What one `dossier run` is, as one typed object: the agent's settings, the engine's config and where it runs.

The CLI builds a `RunSpec` once from its options (tests and scripts build one directly) and hands it
to `engine.agents.launch.start_run`; the local runner, run.json and the Ray workers all read it.
Both configs are checked when the spec is built, so a bad option fails before anything loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tools.errors import DossierError

__all__ = ["RayPlacement", "RunSpec"]


@dataclass(frozen=True, slots=True)
class RayPlacement:
    """Where a run's engines live when it runs on Ray (`dossier run --ray`)."""

    address: str  # 'local' starts a cluster here, 'auto' joins `ray start --head`'s, or HOST:PORT of its head
    workers: int = 1  # Ray workers, one engine each; questions are sharded across them
    gpus_per_worker: float = 0.0  # GPUs each worker reserves (0: CPU; 0.5: two engines per GPU)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise DossierError(f"--workers must be at least 1 (got {self.workers})")
        if self.gpus_per_worker < 0:
            raise DossierError(f"--gpus-per-worker must be 0 or more (got {self.gpus_per_worker})")


@dataclass(slots=True)
class RunSpec:
    """One agent run: what runs (agent, settings, model, engine), on what (questions, corpus), where (placement).

    Args:
        agent: the registered agent's name (`--agent`).
        model: 'default', a model folder or a .gguf file.
        questions: the canonical question file (JSONL).
        out: the run directory (run.json, predictions.jsonl, trajectories.jsonl).
        corpus: the corpus `dossier ingest`/`index` built (None: agents that read no documents).
        settings: `AgentSettings` fields given (the rest at their defaults).
        engine_options: `EngineConfig` fields given; recorded in run.json as given.
        concurrency: episodes in flight at once (per worker on Ray).
        limit: the first N questions only.
        placement: Ray workers, or None for this process.
    """

    agent: str
    model: str
    questions: Path
    out: Path
    corpus: Path | None = None
    settings_options: dict = field(default_factory=dict)
    engine_options: dict = field(default_factory=dict)
    concurrency: int = 16
    limit: int | None = None
    placement: RayPlacement | None = None
    settings: object = field(init=False)  # AgentSettings, built from settings_options
    engine: object = field(init=False)  # EngineConfig, built from engine_options

    def __post_init__(self) -> None:
        from engine.agents.settings import AgentSettings
        from engine.core.config import EngineConfig

        if self.concurrency < 1:
            raise DossierError(f"--concurrency must be at least 1 (got {self.concurrency})")
        self.settings = AgentSettings(agent=self.agent, **self.settings_options)
        self.engine = EngineConfig(**self.engine_options)
