"""The workflow agent's own settings (`dossier run --agent workflow`); read by the episode as attributes.

Declared apart from the episode so `dossier --help` builds their options without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.agents.settings_fields import setting
from tools.errors import DossierError

__all__ = ["WorkflowSettings"]


@dataclass(slots=True)
class WorkflowSettings:
    extract_iterations: int = setting(4, "workflow: model turns of each per-document extraction episode (the last "
                                         "must answer).")
    conversion_table: str | None = setting(None, "workflow: a JSON file of unit rates the structuring step converts "
                                                 "with, e.g. {\"CNY/USD\": 0.14} (1 CNY is 0.14 USD; inverses derived; "
                                                 "no network). A currency without a rate stays unconverted and the "
                                                 "trajectory names it. `dossier sample --suite mudabench` writes one.")

    allow_unsandboxed_code: bool = setting(False, "Run model-written code even where the kernel sandbox "
                                                  "(bubblewrap) is unavailable, with only the in-process policy "
                                                  "and rlimits; run.json records it. Without it such a machine "
                                                  "refuses the run.")

    @staticmethod
    def check(settings) -> None:
        from tools.sandbox.boundary import require_kernel_boundary

        require_kernel_boundary(settings.allow_unsandboxed_code, "the workflow agent")
        if settings.extract_iterations < 1:
            raise DossierError(f"extract_iterations must be at least 1 (got {settings.extract_iterations})")
        if settings.conversion_table is not None:  # a missing or malformed table fails before the model loads
            from engine.agents.workflow.records import ConversionTable

            ConversionTable.load(settings.conversion_table)
