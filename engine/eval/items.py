"""Scoring one gold item: every per-item metric in one record (`ItemResult`).

`score_item` is the single place where a (question, prediction) pair becomes numbers; the
report aggregates these records, and `items.jsonl` stores them so `dossier eval compare` and
`dossier eval splits` can reuse a finished evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from engine.datasets.formats import Prediction, Question
from engine.eval.metrics.anls import ACCURACY_THRESHOLD, ANLSScorer
from engine.eval.metrics.answers import exact_match
from engine.eval.metrics.page_doc_f1 import doc_prf, hop_type, page_prf
from engine.eval.judge import semantic_score
from engine.eval.metrics.kuiper import effort_of
from engine.eval.scorers import registered_scorers
from engine.eval.taxonomy import classify_error, is_verbose

__all__ = ["ItemResult", "score_item"]


@dataclass(slots=True)
class ItemResult:
    """All metrics of one gold item."""

    id: str
    question: str
    has_prediction: bool  # False: no prediction matched this gold item (scored as wrong)
    answer: str | list[str] | None
    anls: float  # ANLS*, best gold variant
    accurate: bool  # ANLS* >= 0.5 (MADQA's `accuracy`)
    exact: bool  # exact match after normalisation
    semantic: float | None  # 1 / 0.5 / 0 from the two-stage judge; None without a judge
    semantic_source: str | None  # "empty", "exact", "refusal", "too_long" or "judge"
    correct: bool  # semantic >= 0.5 with a judge, else `accurate`; drives Kuiper and the taxonomy
    page_precision: float
    page_recall: float
    page_f1: float
    doc_precision: float
    doc_recall: float
    doc_f1: float
    effort: int  # searches, else iterations; 0 means unknown (left out of Kuiper)
    hop_type: str  # single / cross_page / cross_doc, from the gold evidence (else the gold's declared hop_type)
    category: str  # gold "document_category" (or "category"), "unknown" when absent
    domain: str  # gold "domain", "unknown" when absent
    taxonomy: str  # error class, see engine/eval/taxonomy.py
    # each registered scorer's value by its name (engine/eval/scorers.py: DocVQA-2026's binary verdict,
    # MuDABench's tolerance, ...); None where a scorer does not apply. items.jsonl stores them as fields.
    scores: dict[str, bool | float | None] = field(default_factory=dict)

    def __getattr__(self, name: str):
        # a scorer's value reads like a field (item.docvqa), as `compare --verdict` and scripts/results.py read it
        try:
            return object.__getattribute__(self, "scores")[name]
        except KeyError:
            raise AttributeError(f"ItemResult has no field or score {name!r}") from None

    def to_json(self) -> dict:
        out = asdict(self)
        scores = out.pop("scores")
        return {**out, **scores}  # the scores last, as fields: items.jsonl reads as it always has

    @classmethod
    def from_json(cls, obj: dict) -> ItemResult:
        fields = {name: obj.get(name) for name in cls.__dataclass_fields__ if name != "scores"}
        return cls(**fields, scores={s.name: obj.get(s.name) for s in registered_scorers()})


_HOP_NAMES = {"single": "single", "cross_page": "cross_page", "cross-page": "cross_page",
              "cross_doc": "cross_doc", "cross-doc": "cross_doc", "cross-document": "cross_doc",
              "cross_document": "cross_doc"}


def _hop(question: Question) -> str:
    # from the gold evidence (MADQA); a question without page evidence may declare its hop type
    # (MuDABench's importer writes "cross-document")
    if question.evidence:
        return hop_type(question.evidence)
    return _HOP_NAMES.get(str(question.extra.get("hop_type", "single")).lower(), "single")


def _label(question: Question, *keys: str) -> str:
    for key in keys:
        value = question.extra.get(key)
        if value not in (None, ""):
            return str(value)
    return "unknown"


def score_item(
    question: Question,
    prediction: Prediction | None,
    scorer: ANLSScorer,
    judge: Callable | None = None,
    options=None,
) -> ItemResult:
    """Score one gold item against its prediction (None when it has none).

    Args:
        question: the gold item.
        prediction: the matched prediction, or None.
        scorer: the evaluation's ANLS* scorer (shares its cache across items).
        judge: the semantic judge, or None to skip semantic scoring.
        options: the evaluation's settings (EvalConfig) the registered scorers read, e.g. DocVQA-2026's
            `docvqa_require_marker`; None: their defaults.
    """
    variants = question.answer_variants
    answer = prediction.answer if prediction is not None else None
    citations = prediction.citations if prediction is not None else []
    anls = scorer(answer, variants)
    exact = exact_match(answer, variants)
    semantic, source = None, None
    if judge is not None:
        semantic, source = semantic_score(question.question, variants, answer, exact=exact, anls=anls, judge=judge)
    accurate = anls >= ACCURACY_THRESHOLD
    correct = semantic >= 0.5 if semantic is not None else accurate
    page = page_prf(citations, question.evidence)
    doc = doc_prf(citations, question.evidence)
    return ItemResult(
        id=question.id,
        question=question.question,
        has_prediction=prediction is not None,
        answer=answer,
        anls=anls,
        accurate=accurate,
        exact=exact,
        semantic=semantic,
        semantic_source=source,
        correct=correct,
        page_precision=page.precision,
        page_recall=page.recall,
        page_f1=page.f1,
        doc_precision=doc.precision,
        doc_recall=doc.recall,
        doc_f1=doc.f1,
        effort=effort_of(prediction.search_history, prediction.iterations) if prediction is not None else 0,
        hop_type=_hop(question),
        category=_label(question, "document_category", "category"),
        domain=_label(question, "domain"),
        taxonomy=classify_error(correct, answer, citations, question.evidence, prediction is not None,
                                verbose=correct and is_verbose(answer, variants, exact, semantic, source)),
        scores={scorer.name: scorer.score_item(question, prediction, options) for scorer in registered_scorers()},
    )
