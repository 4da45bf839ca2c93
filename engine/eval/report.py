"""The evaluation report as typed dataclasses: `Report` (one run) over `Summary` (one group of items).

`evaluate()` builds a `Report`; `Report.to_dict()` is exactly the report.json `dossier eval` writes
(the same keys in the same order, the same values), and `Report.from_dict()` reads that file back,
today's or an older one (a key an older report lacks reads as None). The analyses keep their own
shapes: `steps`, `behaviour`, the MuDABench blocks and every registered section (engine/eval/sections.py)
stay JSON-ready dicts inside the Report, each rendered by its own renderer.

    report = Report.from_dict(json.loads(Path("eval/report.json").read_text()))
    report.summary.accuracy, report.summary.scorers["mudabench"].value, report.sections["qguide"]

Bump `REPORT_VERSION` when a key changes meaning or leaves; a new key (a new scorer or section) does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.eval.scorers import registered_scorers
from engine.eval.sections import registered_sections

__all__ = ["REPORT_VERSION", "Detail", "JudgeBlock", "Report", "ScorerFigure", "Summary", "as_report"]

REPORT_VERSION = 1

_PAGE_DOC = ("page_precision", "page_recall", "page_f1", "doc_precision", "doc_recall", "doc_f1")
_INPUT_COUNTS = ("n_predictions", "missing_predictions", "unmatched_predictions", "unmatched_prediction_ids",
                 "duplicate_predictions", "matched_by_text", "skipped_lines", "skipped_line_reasons")


@dataclass(slots=True)
class ScorerFigure:
    """A registered scorer's aggregate (engine/eval/scorers.py): `NAME_accuracy` and `NAME_accuracy_ci`."""

    value: float | None  # the share of items it holds for ("proportion") or its mean; None: it applied to none
    interval: list[float] | None  # the Wilson interval of a proportion; None for a mean or no items


@dataclass(slots=True)
class Detail:
    """What only the overall summary computes (breakdown groups do not): MADQA's Kuiper variant and curve, waste."""

    kuiper_madqa: float | None  # the harness's order-dependent Kuiper statistic
    kuiper_curve: list[dict] | None  # [{"effort", "k", "d"}] the curve the statistic is the range of
    wasted_effort_ratio: float | None  # mean steps of wrong answers / of right ones
    mean_steps_correct: float | None  # steps per correctly answered item
    mean_steps_incorrect: float | None  # steps per wrongly answered item

    @classmethod
    def from_dict(cls, d: dict) -> Detail:
        return cls(d.get("kuiper_madqa"), d.get("kuiper_curve"), d.get("wasted_effort_ratio"),
                   d.get("mean_steps_correct"), d.get("mean_steps_incorrect"))


@dataclass(slots=True)
class Summary:
    """The metrics of one group of items (engine/eval/summary.py): every mean is over all gold items in the group."""

    n: int | None  # gold items in the group
    n_with_prediction: int | None  # of them, those with a prediction
    accuracy: float | None  # share with ANLS* >= 0.5
    accuracy_ci: list[float] | None  # its Wilson interval
    mean_anls: float | None  # mean ANLS*
    exact_match: float | None  # share answered exactly
    exact_match_ci: list[float] | None  # its Wilson interval
    semantic_raw: float | None  # the judge's raw share correct; None without a judge
    semantic_accuracy: float | None  # the Rogan-Gladen corrected share
    semantic_accuracy_ci: list[float] | None  # its interval; None when not corrected
    semantic_judged_raw: float | None  # the raw share correct of the items the judge decided (the corrected part)
    semantic_clipped: str | None  # "floor" / "ceiling": that share is outside [1 - q0, q1] and its correction clipped
    judge_calls: int | None  # items the judge decided (not a string match)
    scorers: dict[str, ScorerFigure]  # registered scorer name -> its figure, in registration order
    page_precision: float | None
    page_recall: float | None
    page_f1: float | None  # Page F1 against the gold evidence pages
    doc_precision: float | None
    doc_recall: float | None
    doc_f1: float | None  # Doc F1 against the gold evidence documents
    kuiper: float | None  # effort calibration (MADQA): Kuiper statistic over steps
    kuiper_ci: list[float] | None  # its bootstrap interval; None with no bootstrap
    kuiper_p_value: float | None  # permutation p; None with no bootstrap
    kuiper_n: int | None  # items the statistic used
    kuiper_dropped: int | None  # items left out (no effort recorded)
    kuiper_undefined: str | None  # why the statistic is undefined, or None
    detail: Detail | None  # the overall summary's extras; None for a breakdown group
    taxonomy: dict | None  # failure taxonomy counts (engine/eval/taxonomy.py)

    def to_dict(self) -> dict:
        out = {name: getattr(self, name) for name in ("n", "n_with_prediction", "accuracy", "accuracy_ci", "mean_anls",
                                                      "exact_match", "exact_match_ci", "semantic_raw",
                                                      "semantic_accuracy", "semantic_accuracy_ci", "semantic_judged_raw",
                                                      "semantic_clipped", "judge_calls")}
        for name, figure in self.scorers.items():
            out[f"{name}_accuracy"], out[f"{name}_accuracy_ci"] = figure.value, figure.interval
        out.update({name: getattr(self, name) for name in _PAGE_DOC})
        out.update({name: getattr(self, name) for name in ("kuiper", "kuiper_ci", "kuiper_p_value", "kuiper_n",
                                                           "kuiper_dropped", "kuiper_undefined")})
        if self.detail is not None:
            out.update({name: getattr(self.detail, name) for name in Detail.__slots__})
        out["taxonomy"] = self.taxonomy
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Summary:
        """A summary from its dict; the scorers are those the dict holds (registered ones first, in order)."""
        names = [s.name for s in registered_scorers() if f"{s.name}_accuracy" in d]
        names += [key[:-len("_accuracy")] for key in d if key.endswith("_accuracy") and key != "semantic_accuracy"
                  and key[:-len("_accuracy")] not in names]
        return cls(
            n=d.get("n"), n_with_prediction=d.get("n_with_prediction"), accuracy=d.get("accuracy"),
            accuracy_ci=d.get("accuracy_ci"), mean_anls=d.get("mean_anls"), exact_match=d.get("exact_match"),
            exact_match_ci=d.get("exact_match_ci"), semantic_raw=d.get("semantic_raw"),
            semantic_accuracy=d.get("semantic_accuracy"), semantic_accuracy_ci=d.get("semantic_accuracy_ci"),
            semantic_judged_raw=d.get("semantic_judged_raw"), semantic_clipped=d.get("semantic_clipped"),
            judge_calls=d.get("judge_calls"),
            scorers={name: ScorerFigure(d.get(f"{name}_accuracy"), d.get(f"{name}_accuracy_ci")) for name in names},
            **{name: d.get(name) for name in _PAGE_DOC},
            kuiper=d.get("kuiper"), kuiper_ci=d.get("kuiper_ci"), kuiper_p_value=d.get("kuiper_p_value"),
            kuiper_n=d.get("kuiper_n"), kuiper_dropped=d.get("kuiper_dropped"),
            kuiper_undefined=d.get("kuiper_undefined"),
            detail=Detail.from_dict(d) if "kuiper_curve" in d or "kuiper_madqa" in d else None,
            taxonomy=d.get("taxonomy"))


@dataclass(slots=True)
class JudgeBlock:
    """The report's "judge": whether a judge scored, its calibration, and what `record_provenance` adds."""

    used: bool | None  # whether an LLM judge decided semantic accuracy
    q0: float | None  # the judge's specificity (Rogan-Gladen)
    q1: float | None  # the judge's sensitivity
    m0: int | None  # calibration items that were wrong
    m1: int | None  # calibration items that were right
    provenance: dict = field(default_factory=dict)  # model, calibration_source, correction, cache counts (in order)

    def to_dict(self) -> dict:
        return {"used": self.used, "q0": self.q0, "q1": self.q1, "m0": self.m0, "m1": self.m1, **self.provenance}

    @classmethod
    def from_dict(cls, d: dict) -> JudgeBlock:
        rest = {k: v for k, v in d.items() if k not in ("used", "q0", "q1", "m0", "m1")}
        return cls(d.get("used"), d.get("q0"), d.get("q1"), d.get("m0"), d.get("m1"), rest)


@dataclass(slots=True)
class Report:
    """One evaluation: the overall summary, the inputs it read, breakdowns, and the analyses' sections."""

    report_version: int | None  # the schema version (REPORT_VERSION); None in reports older than it
    summary: Summary  # over every gold item
    n_predictions: int | None  # predictions read
    missing_predictions: int | None  # gold items with no prediction
    unmatched_predictions: int | None  # predictions that matched no gold item
    unmatched_prediction_ids: list[str] | None  # the first 20 of them
    duplicate_predictions: int | None  # predictions for an item already answered
    matched_by_text: int | None  # predictions matched by question text, not id
    skipped_lines: int | None  # unreadable input lines
    skipped_line_reasons: list[str] | None  # the first 50 reasons
    judge: JudgeBlock | None
    breakdowns: dict[str, dict[str, Summary]] | None  # hop_type/category/domain -> group -> its summary
    steps: dict | None  # trajectory metrics (engine/eval/analyses/steps.py, retrieval_curve.py); None: no trajectories
    behaviour: dict | None  # engine/eval/analyses/human.py
    mudabench_coverage: dict | None  # MuDABench fact coverage; None: no MuDABench items
    mudabench_scoring: dict | None  # which scorer produced the MuDABench figures
    sections: dict[str, dict | None]  # registered section name -> its dict, in the report's order
    effort_measures: dict | None  # Kuiper under steps, tokens and time (MADQA Appendix F.4)
    inputs: dict | None = None  # the files read (record_provenance); None before it runs
    source: str | None = None  # "silver" for a mined run, else None (and absent from the dict)
    extra: dict = field(default_factory=dict)  # keys this checkout does not know (a caller's additions), in order

    def scoring(self, scorer: str) -> dict | None:
        """Which judge produced a scorer's figures (`NAME_scoring`: MuDABench's), or None."""
        return getattr(self, f"{scorer}_scoring", None) if scorer == "mudabench" else self.extra.get(f"{scorer}_scoring")

    def to_dict(self) -> dict:
        """The report.json dict, key for key what `dossier eval` has always written."""
        out: dict = {"report_version": self.report_version}
        out.update(self.summary.to_dict())
        out.update({name: getattr(self, name) for name in _INPUT_COUNTS})
        out["judge"] = self.judge.to_dict() if self.judge is not None else None
        out["breakdowns"] = None if self.breakdowns is None else {
            key: {name: summary.to_dict() for name, summary in groups.items()}
            for key, groups in self.breakdowns.items()}
        out.update(steps=self.steps, behaviour=self.behaviour, mudabench_coverage=self.mudabench_coverage,
                   mudabench_scoring=self.mudabench_scoring)
        declared = {s.name for s in registered_sections() if s.declared}
        out.update({name: value for name, value in self.sections.items() if name not in declared})
        out["effort_measures"] = self.effort_measures
        out.update({name: value for name, value in self.sections.items() if name in declared})
        if self.inputs is not None:
            out["inputs"] = self.inputs
        if self.source is not None:
            out["source"] = self.source
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Report:
        """A Report from a report.json dict, today's or an older one (a missing key reads as None)."""
        breakdowns = d.get("breakdowns")
        known = set(_known_keys(d))
        return cls(
            report_version=d.get("report_version"), summary=Summary.from_dict(d),
            **{name: d.get(name) for name in _INPUT_COUNTS},
            judge=JudgeBlock.from_dict(d["judge"]) if isinstance(d.get("judge"), dict) else None,
            breakdowns=None if breakdowns is None else {
                key: {name: Summary.from_dict(group) for name, group in groups.items()}
                for key, groups in breakdowns.items()},
            steps=d.get("steps"), behaviour=d.get("behaviour"), mudabench_coverage=d.get("mudabench_coverage"),
            mudabench_scoring=d.get("mudabench_scoring"),
            sections={s.name: d[s.name] for s in registered_sections() if s.name in d},
            effort_measures=d.get("effort_measures"), inputs=d.get("inputs"), source=d.get("source"),
            extra={k: v for k, v in d.items() if k not in known})


def as_report(report: Report | dict) -> Report:
    """`report` itself, or the report.json dict read as a Report (the renderers take either)."""
    return report if isinstance(report, Report) else Report.from_dict(report)


def _known_keys(d: dict) -> list[str]:
    """The keys of `d` that Report's fields hold (everything else goes to `extra`)."""
    summary = Summary.from_dict(d).to_dict()
    fields = ["report_version", *summary, *_INPUT_COUNTS, "judge", "breakdowns", "steps", "behaviour",
              "mudabench_coverage", "mudabench_scoring", "effort_measures", "inputs", "source"]
    return fields + [s.name for s in registered_sections()]
