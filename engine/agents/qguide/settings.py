"""Q-Guide's own settings and its direct-prompting baselines' (`dossier run --agent qguide|direct`).

Declared here, apart from `config.py`, so `dossier --help` builds their options without importing
the perception tools; the checks import `config` (and `direct`) only when those agents run.
Q-Guide's further options (config.OPTIONS: at_limit, rho_min, calibration, longdoc) become
fields here as they get `dossier run` options.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.agents.settings_fields import setting

__all__ = ["QGuideSettings", "DirectSettings"]


@dataclass(slots=True)
class QGuideSettings:
    max_rounds: int | None = setting(3, "qguide: T_max, policy turns per episode (several tool calls in one turn "
                                        "are one round); the last must submit. Default 3, or the largest budget "
                                        "of --max-rounds-sweep.", cli_default=None)
    gate: str = setting("med", "qguide: τ, low|med|high; a submission below it is verified against the "
                               "observations, and becomes Unknown when unsupported.")
    tools: str = setting("auto", "qguide: recovery tools offered: auto, or a comma-separated subset of text, "
                                 "visual, spatial, structure, lookup (leave-one-out ablation).")
    chunk_pages: int = setting(4, "qguide: pages per chunk of a longer named document.")
    chunk_overlap: int = setting(1, "qguide: pages consecutive chunks share.")
    max_rounds_sweep: str = setting("", "qguide: e.g. 1-6: also record the answer at each T_max, by branching "
                                        "the T_max=6 run at each round.")

    @staticmethod
    def check(settings) -> None:
        """Raise a DossierError for Q-Guide settings that cannot run; --max-rounds not given: 3 or the sweep's largest."""
        from engine.agents.qguide.config import check_settings, parse_sweep

        if settings.max_rounds is None:
            settings.max_rounds = max(parse_sweep(settings.max_rounds_sweep), default=3)
        check_settings(settings)


@dataclass(slots=True)
class DirectSettings:
    inputs: str = setting("both", "direct: what the one turn shows of the document: visual (page images), ocr "
                                  "(page text) or both (the paper's three direct baselines).")

    @staticmethod
    def check(settings) -> None:
        from engine.agents.direct import check_settings

        check_settings(settings)
