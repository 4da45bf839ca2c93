"""The workflow agent's own settings: what `dossier run --agent workflow` adds to the shared agent settings.

    conversion_table   a JSON file of unit rates, {"CNY/USD": 0.1385, "EUR/USD": 1.08} (1 CNY is
                       0.1385 USD; inverses derived). The structuring step converts currencies with
                       it; a currency without a rate stays unconverted and the trajectory names it.
                       No network: rates are the user's, recorded in run.json.

`workflow_options(settings)` reads them from whatever settings object the run carries (the
shared AgentSettings, or a per-agent settings dataclass), so the episode does not depend on
where the option is declared.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.agents.workflow.records import ConversionTable

__all__ = ["WorkflowOptions", "workflow_options"]


@dataclass(slots=True)
class WorkflowOptions:
    conversion_table: str | None = None  # path of the JSON conversion table; None: scales only, no currency rates

    def table(self) -> ConversionTable:
        """The conversion table (a DossierError names a missing or malformed file)."""
        return ConversionTable.load(self.conversion_table)


def workflow_options(settings) -> WorkflowOptions:
    table = getattr(settings, "conversion_table", None)
    return WorkflowOptions(conversion_table=str(table) if table else None)
