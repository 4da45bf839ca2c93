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

    @staticmethod
    def check(settings) -> None:
        if settings.extract_iterations < 1:
            raise DossierError(f"extract_iterations must be at least 1 (got {settings.extract_iterations})")
