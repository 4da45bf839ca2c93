"""Q-Guide's own settings and its direct-prompting baselines' (`dossier run --agent qguide|direct`).

Declared here, apart from `config.py`, so `dossier --help` builds their options without importing
the perception tools; the checks import `config` (and `direct`) only when those agents run.
`--gate auto` is resolved by the check, before the run starts: the calibration run's
reliability table and τ are kept in `gate_table`, so run.json records them. `run_start` then
refuses a question about a calibrated document and returns the table's lines, which
`engine/agents/launch.start_run` shows as it shows its other run-start lines (before the model loads).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.agents.settings_fields import setting

__all__ = ["QGuideSettings", "DirectSettings"]


@dataclass(slots=True)
class QGuideSettings:
    max_rounds: int | None = setting(3, "qguide: T_max, policy turns per episode as Eq. 3 counts them: turn "
                                        "T_max is the limit turn (--at-limit), after T_max - 1 rounds of tool "
                                        "calls (several calls in one turn are one round); 1 is a single pass with "
                                        "no tool. Default 3, or the largest budget of --max-rounds-sweep.",
                                     cli_default=None)
    page_text: str = setting("auto", "qguide: what a text model's first turn shows of the named document's pages: "
                                     "shown (their OCR text), withheld (only their names: the evidence must come "
                                     "from the tools, as a vision model's comes from reading pixels) or auto "
                                     "(withheld with --max-rounds-sweep, so the budget can bind; shown otherwise).")
    at_limit: str = setting("unknown", "qguide: the limit turn, turn T_max: unknown (Eq. 3: a submission "
                                       "meets the gate, asking for more is submit_unknown) or force (the turn "
                                       "admits only submit).")
    gate: str = setting("med", "qguide: τ, low|med|high; a submission below it is verified against the "
                               "observations, and becomes Unknown when unsupported. auto: τ = min{ℓ : ρ(ℓ) ≥ "
                               "--rho-min} from --calibration.")
    rho_min: float | None = setting(None, "qguide --gate auto: ρ_min, the reliability floor in (0, 1], e.g. 0.6.")
    calibration: str | None = setting(None, "qguide --gate auto: a Q-Guide run directory on questions about other "
                                            "documents (split by document); ρ(ℓ) is measured on it.")
    gate_table: dict | None = setting(None, "the resolved --gate auto: τ and the reliability table", cli=False)
    longdoc: str = setting("chunk", "qguide: a named document longer than --chunk-pages: chunk (overlapping "
                                    "chunks, a confidence-weighted vote; the paper's choice) or retrieve (one "
                                    "loop over the --chunk-pages pages BM25 ranks best).")
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
        if settings.gate == "auto" and settings.gate_table is None:
            from engine.agents.qguide.calibrate import resolve_calibration

            settings.gate_table = resolve_calibration(settings.calibration, settings.rho_min)

    @staticmethod
    def run_start(settings, questions) -> list[str]:
        """What `start_run` checks and shows once the questions are known, before the model loads.

        Args:
            settings: the run's checked `AgentSettings`.
            questions: the questions this run answers (after --limit).

        Returns:
            Lines to show: for --gate auto, the reliability table and the chosen τ.

        Raises:
            DossierError: a question about a document the calibration run answered questions about.
        """
        if settings.gate != "auto":
            return []
        from engine.agents.qguide.calibrate import check_questions, format_table

        check_questions(settings.gate_table, questions)
        return format_table(settings.gate_table).splitlines()


@dataclass(slots=True)
class DirectSettings:
    inputs: str = setting("both", "direct: what the one turn shows of the document: visual (page images), ocr "
                                  "(page text) or both (the paper's three direct baselines).")

    @staticmethod
    def check(settings) -> None:
        from engine.agents.direct import check_settings

        check_settings(settings)
